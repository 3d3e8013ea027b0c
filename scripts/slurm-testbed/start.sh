#!/usr/bin/env bash
# Mirage's Slurm test cluster: real Slurm daemons from the distribution's packages, on
# loopback, on one machine, as root. Emulates a small GPU cluster:
#   NODES x (CPUS cpus, MEM_MB memory, GPUS fake "a100" GPUs) gpu[1-NODES], and
#   CPU_NODES CPU-only nodes cpu[1-CPU_NODES] (CPUS cpus, CPU_MEM_MB memory, no GPUs),
#   one slurmd per node, slurmctld, slurmdbd on MariaDB (so sacct works), munge.
#   Nothing runs under systemd.
# Partitions: gpu (the default: gpu[1-NODES], 2 days), debug (gpu1, 1 h), cpu (the CPU
# nodes, 2 days) and capped (gpu[1-NODES], 1 h, partition QOS "capped": at most 2 running
# jobs per user, the rest pend with reason QOSMaxJobsPerUserLimit). Accounting limits are
# enforced (AccountingStorageEnforce=associations,limits,qos): every user who submits needs
# an association in the account "mirage" (root's is added here, the test users' by users.sh).
#
# Idempotent: installs missing Debian packages, (re)writes configs, starts only what is not
# running, restarts Slurm daemons whose config changed, and waits until every node is idle.
# Tested with Slurm 22.05 (Debian 12); version-specific bits are guarded for 23.x/24.11.
#
# Environment (defaults in brackets):
#   MIRAGE_SLURM_LAB [/tmp/mirage-slurm]  state: pids, logs, spool, MariaDB data, fake GPUs
#   MIRAGE_SLURM_NODES [4] MIRAGE_SLURM_CPUS [16] MIRAGE_SLURM_MEM_MB [128000] MIRAGE_SLURM_GPUS [4]
#   MIRAGE_SLURM_CPU_NODES [2] MIRAGE_SLURM_CPU_MEM_MB [64000]
#   MIRAGE_SLURM_READY_TIMEOUT [90]       seconds to wait for the nodes
# Stop with scripts/slurm-testbed/stop.sh [--purge].
set -euo pipefail

LAB=${MIRAGE_SLURM_LAB:-/tmp/mirage-slurm}
NODES=${MIRAGE_SLURM_NODES:-4}
CPUS=${MIRAGE_SLURM_CPUS:-16}
MEM_MB=${MIRAGE_SLURM_MEM_MB:-128000}
GPUS=${MIRAGE_SLURM_GPUS:-4}
CPU_NODES=${MIRAGE_SLURM_CPU_NODES:-2}
CPU_MEM_MB=${MIRAGE_SLURM_CPU_MEM_MB:-64000}
READY_TIMEOUT=${MIRAGE_SLURM_READY_TIMEOUT:-90}
RUN=$LAB/run
LOG=$LAB/log
SPOOL=$LAB/spool
DBDIR=$LAB/mariadb
DBSOCK=$DBDIR/mysqld.sock
DBPORT=3306
DBPASS=mirage-slurm-pw
CONF_DIR=/etc/slurm
CLUSTER=mirage
ACCOUNT=mirage
NODELIST="gpu[1-$NODES]"
CPU_NODELIST="cpu[1-$CPU_NODES]"
ALL_NODES=$((NODES + CPU_NODES))
QOS_CAPPED=capped
QOS_CAPPED_MAX_JOBS_PER_USER=2
START_NS=$(date +%s%N)

elapsed() { echo $(( ($(date +%s%N) - START_NS) / 1000000 )); }
say() { printf '[start.sh %5d ms] %s\n' "$(elapsed)" "$*"; }
die() { say "ERROR: $*" >&2; exit 1; }
pid_of() { # pid_of PIDFILE COMM -> prints the pid when it is alive and runs COMM
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -dc '0-9' < "$1")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ] || return 1
  # a dying daemon lingers as a zombie for a moment
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  echo "$pid"
}
alive() { pid_of "$@" > /dev/null; }
waitfor() { # waitfor SECONDS CMD... : poll every 0.2 s
  local deadline=$(( $(date +%s) + $1 )); shift
  until "$@" > /dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
if [ "$(id -u)" != 0 ]; then
  # it installs packages and starts daemons: re-run under passwordless sudo where there is one
  command -v sudo > /dev/null && sudo -n true 2> /dev/null && exec sudo -n -E "$0" "$@"
  die "must run as root (it installs packages and starts daemons); no passwordless sudo"
fi
mkdir -p "$LAB" "$RUN" "$LOG" "$SPOOL/slurmctld" "$LAB/fakedev" "$LAB/etc"
chmod 755 "$LAB"

# ------------------------------------------------------------------ 1. packages
PKGS="munge slurmctld slurmd slurm-client slurmdbd mariadb-server mariadb-client"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q 'install ok installed' || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  # Docker-style images carry a policy-rc.d that keeps postinst from starting services;
  # elsewhere the packages' services may start under systemd: we only use our own daemons.
  apt-get update -qq > "$LAB/apt-update.log" 2>&1 || { tail -5 "$LAB/apt-update.log"; die "apt-get update failed"; }
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing > "$LAB/apt-install.log" 2>&1 \
    || { tail -20 "$LAB/apt-install.log"; die "apt-get install failed"; }
  say "installed"
fi
SLURM_VERSION=$(slurmctld -V | awk '{print $2}')
SLURM_MAJOR=${SLURM_VERSION%%.*}
SLURM_MINOR=${SLURM_VERSION#*.}; SLURM_MINOR=${SLURM_MINOR%%.*}
SLURM_NUM=$(( 10#$SLURM_MAJOR * 100 + 10#$SLURM_MINOR ))   # 22.05 -> 2205
say "slurm $SLURM_VERSION"

# ------------------------------------------------------------------ 2. munge
mkdir -p /run/munge; chown munge:munge /run/munge; chmod 755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile=/etc/munge/munge.key 2> /dev/null \
    || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 2> /dev/null
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid munged; then
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged --force
fi
waitfor 10 bash -c 'munge -n | unmunge' || die "munge does not work"

# ------------------------------------------------------------------ 3. configs
# Fake GPUs: gres/gpu drops GPUs without File= (and the node drains), and File= must be a
# device: symlinks to /dev/null pass. No cgroups, so nothing actually confines devices.
for ((i = 0; i < GPUS; i++)); do ln -sfn /dev/null "$LAB/fakedev/nvidia$i"; done

# Version guards. Everything in slurm.conf below is meant to be valid for 22.05 (Debian 12,
# tested) and 24.11 (Debian 13, not tested here); options removed since 22.05 (e.g. CredType=cred/none, FastSchedule,
# SallocDefaultCommand) are simply not used. --json output needs 21.08+.
if [ "$SLURM_NUM" -lt 2108 ]; then
  die "slurm $SLURM_VERSION is too old: squeue/sacct --json need 21.08+"
fi
VERSIONED=""
if [ "$SLURM_NUM" -le 2205 ]; then
  # spelled out only for the release this script is tested with; munge is the default
  # credential plugin everywhere, and later releases reshuffled the cred/* choices
  VERSIONED+="CredType=cred/munge"$'\n'
fi

# Partitions: finite MaxTime everywhere, so that bf_window (minutes) can cover the longest one.
GPU_MAXTIME_MIN=2880      # 2-00:00:00
BF_WINDOW=$GPU_MAXTIME_MIN

SLURM_CONF_TEXT=$(cat << EOF
# Generated by Mirage's scripts/slurm-testbed/start.sh for Slurm $SLURM_VERSION - do not edit.
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
${VERSIONED}TaskPlugin=task/none
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
# no cgroups here: plain process tracking
ProctrackType=proctrack/linuxproc
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
# Scheduling as sites configure it for what Mirage reads, with fast cycles for tests:
# bf_window (minutes) covers the longest partition MaxTime, so squeue --start has estimates.
SchedulerType=sched/backfill
SchedulerParameters=bf_window=$BF_WINDOW,bf_resolution=1,bf_interval=1,sched_interval=1,bf_continue
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
PriorityType=priority/multifactor
PriorityWeightAge=1000
PriorityWeightJobSize=100
PriorityWeightFairshare=10000
PriorityWeightPartition=0
PriorityWeightQOS=0
PriorityMaxAge=1-0
PriorityDecayHalfLife=7-0
PriorityFavorSmall=NO
# time limits act quickly (slurmctld still checks limits only about every 30 s)
KillWait=2
OverTimeLimit=0
MinJobAge=300
# room for scripts/bench/slurm_backends.py's 10,000 queued jobs beside the finished ones
# slurmctld keeps for MinJobAge (the default, 10000, counts both)
MaxJobCount=30000
InactiveLimit=0
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
# nodes are declared bigger than the host: trust slurm.conf, not the hardware
SlurmdParameters=config_overrides
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
# associations, their limits and QOS limits (partition capped's QOS) are enforced
AccountingStorageEnforce=associations,limits,qos
# the job's --comment reaches sacct only with this flag
AccountingStoreFlags=job_comment
JobCompType=jobcomp/none
NodeName=$NODELIST NodeHostname=localhost NodeAddr=127.0.0.1 Port=[17001-$((17000 + NODES))] CPUs=$CPUS Boards=1 SocketsPerBoard=2 CoresPerSocket=$((CPUS / 2)) ThreadsPerCore=1 RealMemory=$MEM_MB Gres=gpu:a100:$GPUS State=UNKNOWN
NodeName=$CPU_NODELIST NodeHostname=localhost NodeAddr=127.0.0.1 Port=[17101-$((17100 + CPU_NODES))] CPUs=$CPUS Boards=1 SocketsPerBoard=2 CoresPerSocket=$((CPUS / 2)) ThreadsPerCore=1 RealMemory=$CPU_MEM_MB State=UNKNOWN
PartitionName=gpu Nodes=$NODELIST Default=YES DefaultTime=01:00:00 MaxTime=2-00:00:00 State=UP
PartitionName=debug Nodes=gpu1 Default=NO DefaultTime=00:10:00 MaxTime=01:00:00 State=UP
PartitionName=cpu Nodes=$CPU_NODELIST Default=NO DefaultTime=01:00:00 MaxTime=2-00:00:00 State=UP
PartitionName=capped Nodes=$NODELIST Default=NO DefaultTime=00:10:00 MaxTime=01:00:00 QOS=$QOS_CAPPED State=UP
EOF
)
GRES_CONF_TEXT="NodeName=$NODELIST Name=gpu Type=a100 File=$LAB/fakedev/nvidia[0-$((GPUS - 1))]"
DBD_CONF_TEXT=$(cat << EOF
# Generated by Mirage's scripts/slurm-testbed/start.sh - do not edit.
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
DebugLevel=info
LogFile=$LOG/slurmdbd.log
PidFile=$RUN/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DBPORT
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=mirage_acct_db
EOF
)
changed=""
writeconf() { # writeconf NAME CONTENT MODE
  local path=$CONF_DIR/$1
  if [ ! -f "$path" ] || [ "$(cat "$path")" != "$2" ]; then
    printf '%s\n' "$2" > "$path"; changed="$changed $1"
  fi
  chmod "$3" "$path"; cp -f "$path" "$LAB/etc/"
}
mkdir -p "$CONF_DIR"
writeconf slurm.conf "$SLURM_CONF_TEXT" 644
writeconf gres.conf "$GRES_CONF_TEXT" 644
writeconf slurmdbd.conf "$DBD_CONF_TEXT" 600
if [ -n "$changed" ]; then
  say "config changed:$changed"
  for f in "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid" "$RUN/slurmdbd.pid"; do
    [ -e "$f" ] || continue
    c=$(basename "$f" .pid); c=${c%%-*}
    if pid=$(pid_of "$f" "$c"); then
      say "stopping $c ($pid) for the new config"; kill "$pid"
      waitfor 15 bash -c "! [ \"\$(awk '{print \$3}' /proc/$pid/stat 2>/dev/null)\" ] || [ \"\$(awk '{print \$3}' /proc/$pid/stat 2>/dev/null)\" = Z ]" || true
    fi
  done
fi

# ------------------------------------------------------------------ 4. MariaDB + slurmdbd
if [ ! -d "$DBDIR/data/mysql" ]; then
  say "initialising MariaDB in $DBDIR/data"
  mkdir -p "$DBDIR/data"; chown -R mysql:mysql "$DBDIR"
  mariadb-install-db --no-defaults --user=mysql --datadir="$DBDIR/data" \
    --auth-root-authentication-method=socket --skip-test-db > "$LOG/mariadb-install.log" 2>&1 \
    || { tail -20 "$LOG/mariadb-install.log"; die "mariadb-install-db failed"; }
fi
chown mysql:mysql "$DBDIR"
if ! alive "$DBDIR/mysqld.pid" mariadbd; then
  say "starting mariadbd"
  # its error log lives in its own folder: mysql cannot write root-owned log dirs
  setsid nohup /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$DBDIR/data" \
    --socket="$DBSOCK" --pid-file="$DBDIR/mysqld.pid" --bind-address=127.0.0.1 --port=$DBPORT \
    --skip-name-resolve --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 \
    --log-error="$DBDIR/mariadb.err" < /dev/null > /dev/null 2>&1 &
fi
waitfor 30 mariadb-admin --socket="$DBSOCK" ping || die "MariaDB did not come up ($DBDIR/mariadb.err)"
mariadb --socket="$DBSOCK" -u root << EOF
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
GRANT ALL ON mirage_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON mirage_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
if ! alive "$RUN/slurmdbd.pid" slurmdbd; then
  say "starting slurmdbd"
  slurmdbd
fi
waitfor 60 sacctmgr -n list cluster || die "slurmdbd does not answer ($LOG/slurmdbd.log)"
sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" > /dev/null
sacctmgr -n -P list account format=account | grep -qx "$ACCOUNT" \
  || sacctmgr -i add account "$ACCOUNT" Description=mirage-tests Organization=mirage > /dev/null
sacctmgr -n -P list assoc format=account,user | grep -qx "$ACCOUNT|root" \
  || sacctmgr -i add user root Account="$ACCOUNT" DefaultAccount="$ACCOUNT" > /dev/null
# partition capped's QOS: slurmctld resolves a partition's QOS when it starts
sacctmgr -n -P list qos format=name | grep -qx "$QOS_CAPPED" \
  || sacctmgr -i add qos "$QOS_CAPPED" > /dev/null
[ "$(sacctmgr -n -P list qos "$QOS_CAPPED" format=maxjobspu)" = "$QOS_CAPPED_MAX_JOBS_PER_USER" ] \
  || sacctmgr -i modify qos "$QOS_CAPPED" set MaxJobsPerUser="$QOS_CAPPED_MAX_JOBS_PER_USER" > /dev/null
"$(dirname "$(readlink -f "$0")")/users.sh"  # mirage-alice, -bob, -carol, -dave (multi-user tests)
say "slurmdbd ready"

# ------------------------------------------------------------------ 5. slurmctld + one slurmd per node
if ! alive "$RUN/slurmctld.pid" slurmctld; then
  say "starting slurmctld"
  slurmctld
fi
waitfor 30 scontrol ping || die "slurmctld does not answer ($LOG/slurmctld.log)"
started=""
for ((i = 1; i <= NODES; i++)); do
  if ! alive "$RUN/slurmd-gpu$i.pid" slurmd; then
    mkdir -p "$SPOOL/slurmd-gpu$i"
    slurmd -N "gpu$i"; started="$started gpu$i"
  fi
done
for ((i = 1; i <= CPU_NODES; i++)); do
  if ! alive "$RUN/slurmd-cpu$i.pid" slurmd; then
    mkdir -p "$SPOOL/slurmd-cpu$i"
    slurmd -N "cpu$i"; started="$started cpu$i"
  fi
done
[ -n "$started" ] && say "started slurmd for:$started"

# ------------------------------------------------------------------ 6. wait for idle nodes
nodes_ready() { # every node usable (idle/mixed/allocated/completing), none down/drained/unknown
  local st; st=$(sinfo -h -N -o '%N %T' 2> /dev/null | sort -u) || return 1
  [ "$(printf '%s\n' "$st" | grep -c .)" = "$ALL_NODES" ] || return 1
  ! printf '%s\n' "$st" | awk '{print $2}' | grep -qvE '^(idle|mixed|allocated|completing)$'
}
if ! waitfor "$READY_TIMEOUT" nodes_ready; then
  sinfo -N -o '%N %T %E'
  die "nodes not ready after ${READY_TIMEOUT}s (logs: $LOG)"
fi
say "cluster ready"
sinfo -N -o '%N %P %T %c %m %G'
echo "Logs: $LOG  Configs: $CONF_DIR (copies in $LAB/etc)  PIDs: $RUN, $DBDIR, /run/munge"
echo "Stop: scripts/slurm-testbed/stop.sh [--purge]"
