#!/usr/bin/env bash
# Re-record the real Slurm output under tests/data/slurm/ from the test cluster
# (scripts/slurm-testbed/start.sh must be up). Takes about 2 minutes (a --time=1 job needs
# ~90 s to reach TIMEOUT). Submits jobs as the current user and cancels its own jobs at the end.
#   usage: scripts/slurm-testbed/record-fixtures.sh [OUTDIR]   (default tests/data/slurm)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$HERE/../../tests/data/slurm}
LAB=${MIRAGE_SLURM_LAB:-/tmp/mirage-slurm}
JOBOUT=$LAB/jobout
mkdir -p "$OUT" "$JOBOUT"
OUT=$(cd "$OUT" && pwd)
# the same cleaned environment Mirage uses: no format overrides
unset SQUEUE_FORMAT SQUEUE_FORMAT2 SQUEUE_SORT SACCT_FORMAT SLURM_TIME_FORMAT SINFO_FORMAT
export TZ=UTC
START_NS=$(date +%s%N)
say() { printf '[record %6d ms] %s\n' "$(( ($(date +%s%N) - START_NS) / 1000000 ))" "$*"; }
scontrol ping > /dev/null || { echo "slurm is not up: run scripts/slurm-testbed/start.sh" >&2; exit 1; }
T_START=$(date -u +%Y-%m-%dT%H:%M:%S)
MINE=()
sb() { # sb SBATCH-ARGS... -> job id
  local id
  id=$(sbatch --parsable --output="$JOBOUT/%x-%j.out" "$@")
  id=${id%%;*}; MINE+=("$id"); echo "$id"
}
state_of() { squeue -h -j "$1" -o %T 2> /dev/null | head -1; }
wait_state() { # wait_state JOBID STATE SECONDS
  local end=$(( $(date +%s) + $3 ))
  until [ "$(state_of "$1")" = "$2" ]; do
    [ "$(date +%s)" -lt "$end" ] || { echo "job $1 not $2 after $3 s" >&2; return 1; }
    sleep 0.3
  done
}
cleanup() { [ ${#MINE[@]} -gt 0 ] && scancel "${MINE[@]}" 2> /dev/null || true; }
trap cleanup EXIT

# ---------------------------------------------------------------- accounting jobs (finish early)
say "submitting accounting jobs"
TIMEOUT_JOB=$(sb --job-name=mirage-timeout --time=1 --comment="mirage: expect TIMEOUT" --wrap='sleep 600')
DONE_JOB=$(sb --job-name=mirage-ok --time=5 --gres=gpu:1 --comment="mirage chain=c1 step=1" \
  --wrap='echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; sleep 1')
FAIL_JOB=$(sb --job-name=mirage-fail --time=5 --wrap='echo failing >&2; exit 3')
ARRAY_DONE=$(sb --job-name=mirage-array-done --time=5 --array=1-3 --wrap='sleep 1')
CANCEL_JOB=$(sb --job-name=mirage-cancel --time=10 --wrap='sleep 600')
wait_state "$CANCEL_JOB" RUNNING 30
wait_state "$TIMEOUT_JOB" RUNNING 30
sleep 1
scancel "$CANCEL_JOB"
say "accounting jobs: timeout=$TIMEOUT_JOB ok=$DONE_JOB fail=$FAIL_JOB array=$ARRAY_DONE cancel=$CANCEL_JOB"

# ---------------------------------------------------------------- queue scenario
# 4 nodes x 4 GPUs. RUN (1 node, 1 day) + array tasks 0-2 (3 nodes, 1.5 days) fill every GPU;
# BIG (4 nodes, job-size priority) gets the reservation at +1.5 days: pending with an estimate;
# array tasks 3-5 fit only after BIG (beyond bf_window = 2 days): pending without an estimate.
say "submitting queue scenario"
RUN_JOB=$(sb --job-name=mirage-train --time=1-00:00:00 --gres=gpu:4 --comment="mirage chain=c2 step=1" \
  --wrap='echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; sleep 3600')
wait_state "$RUN_JOB" RUNNING 30
ARRAY_JOB=$(sb --job-name=mirage-sweep --time=1-12:00:00 --gres=gpu:4 --array=0-5 --wrap='sleep 3600')
# let the array's first wave start before the big job (whose job-size priority is higher)
# takes the reservation
wait_state "${ARRAY_JOB}_2" RUNNING 30
DEP_JOB=$(sb --job-name=mirage-train-s2 --time=1-00:00:00 --gres=gpu:4 --dependency="afterok:$RUN_JOB" \
  --comment="mirage chain=c2 step=2" --wrap='sleep 60')
BIG_JOB=$(sb --job-name=mirage-big --time=2-00:00:00 --nodes=4 --gres=gpu:4 --wrap='sleep 60')
SMALL_JOB=$(sb --job-name=mirage-small --time=01:00:00 --gres=gpu:1 --wrap='sleep 60')
HELD_JOB=$(sb --job-name=mirage-held --time=01:00:00 --gres=gpu:2 --hold --wrap='sleep 60')
DEBUG_JOB=$(sb --job-name=mirage-debug -p debug --time=00:30:00 --gres=gpu:1 --wrap='sleep 60')
say "queue: run=$RUN_JOB array=$ARRAY_JOB dep=$DEP_JOB big=$BIG_JOB small=$SMALL_JOB held=$HELD_JOB debug=$DEBUG_JOB"
# a few backfill cycles so that every estimate is computed
sleep 4
squeue --json > "$OUT/squeue.json"
squeue --start -h -o '%i|%S|%N|%P|%r' > "$OUT/squeue-start.txt"
squeue -h -o '%i|%T|%r|%S' > "$OUT/squeue-plain.txt"
# stderr only: --test-only prints its estimate there (and consumes a job id)
sbatch --test-only --time=01:00:00 --gres=gpu:4 --wrap='sleep 1' 2> "$OUT/sbatch-test-only-busy.stderr" || true
# refused: more GPUs per node than any node has
sbatch --test-only --time=01:00:00 --gres=gpu:8 --wrap='sleep 1' 2> "$OUT/sbatch-test-only-refused.stderr" || true
sbatch --parsable --time=01:00:00 --gres=gpu:8 --wrap='sleep 1' 2> "$OUT/sbatch-refused.stderr" || true
printf '%s\n' "$RUN_JOB" > "$OUT/sbatch-parsable.txt"
cat "$JOBOUT/mirage-train-$RUN_JOB.out" > "$OUT/job-gpu-env.txt" 2> /dev/null || true
scontrol -o show partition > "$OUT/scontrol-show-partition.txt"
scontrol -o show node > "$OUT/scontrol-show-node.txt"
scontrol show config > "$OUT/scontrol-show-config.txt"
scontrol -o show job "$RUN_JOB" > "$OUT/scontrol-show-job.txt"
say "queue recorded; cancelling the queue scenario"
scancel "$RUN_JOB" "$ARRAY_JOB" "$DEP_JOB" "$BIG_JOB" "$SMALL_JOB" "$HELD_JOB" "$DEBUG_JOB"
sleep 2
sbatch --test-only --time=01:00:00 --gres=gpu:4 --wrap='sleep 1' 2> "$OUT/sbatch-test-only-free.stderr" || true

# ---------------------------------------------------------------- wait for TIMEOUT, then sacct
say "waiting for job $TIMEOUT_JOB to time out (~90 s)"
end=$(( $(date +%s) + 180 ))
until sacct -n -X -P -j "$TIMEOUT_JOB" -o State -S "$T_START" -E now | grep -q TIMEOUT; do
  [ "$(date +%s)" -lt "$end" ] || { echo "no TIMEOUT after 180 s" >&2; exit 1; }
  sleep 2
done
sleep 2
T_END=$(date -u +%Y-%m-%dT%H:%M:%S)
sacct --json -a -S "$T_START" -E "$T_END" > "$OUT/sacct.json"
sacct --json -a -X -S "$T_START" -E "$T_END" > "$OUT/sacct-X.json"
sacct -a -X -P -S "$T_START" -E "$T_END" -o JobID,JobName,State,ExitCode,Comment > "$OUT/sacct-plain.txt"
{
  echo "recorded_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "slurm=$(sinfo -V)"
  echo "os=$(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "sacct_window=$T_START..$T_END"
  echo "jobs: timeout=$TIMEOUT_JOB completed=$DONE_JOB failed=$FAIL_JOB array_completed=$ARRAY_DONE cancelled=$CANCEL_JOB"
  echo "jobs: running=$RUN_JOB array=$ARRAY_JOB dependent=$DEP_JOB big_no_estimate=$BIG_JOB small=$SMALL_JOB held=$HELD_JOB debug=$DEBUG_JOB"
} > "$OUT/recording.txt"
say "done: $OUT"
