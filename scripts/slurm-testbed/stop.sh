#!/usr/bin/env bash
# Stop Mirage's Slurm test cluster (scripts/slurm-testbed/start.sh), by PID from pid files:
# only the daemons that start.sh started are touched.
#   --purge      also wipe job state, spool, logs and the accounting database
#   --keep-jobs  do not scancel jobs first (their slurmstepd would outlive slurmd)
#   --keep-munge leave munged running
set -uo pipefail
if [ "$(id -u)" != 0 ] && command -v sudo > /dev/null && sudo -n true 2> /dev/null; then
  exec sudo -n -E "$0" "$@" # the daemons are root's: stop them as root
fi
LAB=${MIRAGE_SLURM_LAB:-/tmp/mirage-slurm}
RUN=$LAB/run
DBDIR=$LAB/mariadb
PURGE=0; KEEPJOBS=0; KEEPMUNGE=0
for a in "$@"; do
  case $a in
    --purge) PURGE=1 ;;
    --keep-jobs) KEEPJOBS=1 ;;
    --keep-munge) KEEPMUNGE=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
START_NS=$(date +%s%N)
say() { printf '[stop.sh %5d ms] %s\n' "$(( ($(date +%s%N) - START_NS) / 1000000 ))" "$*"; }

pid_of() { # pid_of PIDFILE COMM -> prints the pid when it is alive and runs COMM
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc '0-9' < "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ] && echo "$pid"
}
running() { # running PID -> 0 while the process exists and is not a zombie
  local st; st=$(awk '{print $3}' "/proc/$1/stat" 2> /dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}
stop() { # stop PIDFILE COMM
  local pid
  pid=$(pid_of "$1" "$2") || return 0
  kill -TERM "$pid" 2> /dev/null
  for _ in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then
    say "$2 ($pid) still alive after 10 s: SIGKILL"; kill -KILL "$pid" 2> /dev/null; sleep 0.2
  fi
  say "stopped $2 (pid $pid)"
}

if [ "$KEEPJOBS" = 0 ] && pid_of "$RUN/slurmctld.pid" slurmctld > /dev/null; then
  jobs=$(squeue -h -o %i 2> /dev/null | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    say "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2> /dev/null
    for _ in $(seq 1 75); do [ -z "$(squeue -h -t R,CG,S -o %i 2> /dev/null)" ] && break; sleep 0.2; done
  fi
fi
for f in "$RUN"/slurmd-*.pid; do [ -e "$f" ] && stop "$f" slurmd; done
stop "$RUN/slurmctld.pid" slurmctld
stop "$RUN/slurmdbd.pid" slurmdbd
stop "$DBDIR/mysqld.pid" mariadbd
[ "$KEEPMUNGE" = 1 ] || stop /run/munge/munged.pid munged

if [ "$PURGE" = 1 ]; then
  say "purging $LAB (state, logs, accounting DB)"
  rm -rf "$LAB/spool" "$LAB/log" "$DBDIR" "$RUN"
fi
left=$(ps -o pid=,stat=,comm= -C slurmctld,slurmd,slurmdbd,slurmstepd,mariadbd 2> /dev/null | awk '$2 !~ /^Z/')
[ -n "$left" ] && { echo "still running (not started by start.sh, or not stopped):"; echo "$left"; }
say "done"
