#!/bin/bash
# `make test`: lint and unit tests beside the real-Slurm tests, on one cluster start.
#
# The Slurm tests mostly wait on real time (1-minute time limits, the fidelity check's live
# run of a recorded workload) and leave the CPUs idle; run after them, lint and unit tests
# added about 5 minutes to CI. They run niced, so that they never take the CPU from
# slurmctld, slurmd or the daemon under test, and they are done long before the fidelity
# check (module order: after the docs test, about 10 minutes in). Their output is printed as one block when
# they end. The exit status is non-zero if either part failed; the cluster is stopped
# whatever the outcome.
set -u
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
MAKE=${MAKE:-make}
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

scripts/slurm-testbed/start.sh || { scripts/slurm-testbed/stop.sh; exit 1; }

# The pyslurm backend's tests need pyslurm built from the vendored source (minutes of C
# compilation, cached after the first time): built beside the Slurm tests, after start.sh
# (both may apt-get install), niced. Its tests run last (tests/conftest.py) and wait for
# the exit status it writes; without ../shared's source they are skipped, with it they must run.
PYSLURM_SRC=${PYSLURM_TARBALL:-../shared/vendor/pyslurm-22.5.3.tar.gz}
if [ -f "$PYSLURM_SRC" ]; then
  export MIRAGE_PYSLURM_BUILD="$logdir/pyslurm.rc" MIRAGE_REQUIRE_PYSLURM=1
  ( nice -n 10 scripts/build-pyslurm.sh "$(dirname "$BIN")" "$PYSLURM_SRC" >"$logdir/pyslurm.log" 2>&1
    echo $? >"$logdir/pyslurm.rc" ) &
else
  echo "no $PYSLURM_SRC: the pyslurm backend's tests will be skipped"
fi

set -m  # the background half gets its own process group, so that it can be stopped whole
(
  MIRAGE_REQUIRE_POSTGRES=1 nice -n 15 "$MAKE" --no-print-directory lint unit >"$logdir/quick.log" 2>&1
  rc=$?
  echo "$rc" >"$logdir/quick.rc"
  printf '\n===== lint and unit tests (beside the Slurm tests): %s =====\n' \
    "$([ "$rc" = 0 ] && echo passed || echo "FAILED, rc $rc")"
  cat "$logdir/quick.log"
  printf '===== end of lint and unit tests =====\n'
) &
quick=$!
set +m
# interrupted (Ctrl-C, CI timeout): stop the background half and the cluster too
trap 'kill -- -$quick 2>/dev/null || kill "$quick" 2>/dev/null; scripts/slurm-testbed/stop.sh; exit 130' INT TERM

MIRAGE_REQUIRE_SLURM=1 MIRAGE_FIDELITY=1 "$BIN/pytest" -m "slurm and not slurm_slow" -q
slurm_rc=$?
scripts/slurm-testbed/stop.sh
wait "$quick"
wait  # the pyslurm build, if its tests were skipped before it ended
quick_rc=$(cat "$logdir/quick.rc" 2>/dev/null || echo 1)

echo "lint and unit tests: rc $quick_rc; Slurm tests: rc $slurm_rc"
[ "$quick_rc" = 0 ] && [ "$slurm_rc" = 0 ]
