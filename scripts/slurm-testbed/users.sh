#!/usr/bin/env bash
# Ordinary local users for the multi-user tests and workloads (tests/slurm/test_two_users.py,
# the fidelity suite's recorded workloads): mirage-alice, mirage-bob, mirage-carol and
# mirage-dave, with home directories, known to Slurm's accounting in the test cluster's
# account. Idempotent; as root (start.sh calls it once slurmdbd is up).
#
# On one host munge and getpwnam already know them; the test cluster sets
# AccountingStorageEnforce=associations,limits,qos, so their jobs are refused without the
# association added here (sacct then shows each job under its user's account).
set -euo pipefail
USERS=${MIRAGE_TEST_USERS:-"mirage-alice mirage-bob mirage-carol mirage-dave"}
ACCOUNT=${MIRAGE_SLURM_ACCOUNT:-mirage}
if [ "$(id -u)" != 0 ]; then
  command -v sudo > /dev/null && sudo -n true 2> /dev/null && exec sudo -n -E "$0" "$@"
  echo "users.sh: must run as root" >&2; exit 1
fi
for u in $USERS; do
  id -u "$u" > /dev/null 2>&1 || useradd -m -s /bin/bash "$u"
done
if command -v sacctmgr > /dev/null && sacctmgr -n list cluster > /dev/null 2>&1; then
  assoc=$(sacctmgr -n -P list assoc format=account,user)
  for u in $USERS; do
    printf '%s\n' "$assoc" | grep -qx "$ACCOUNT|$u" \
      || sacctmgr -i add user "$u" Account="$ACCOUNT" DefaultAccount="$ACCOUNT" > /dev/null
  done
fi
