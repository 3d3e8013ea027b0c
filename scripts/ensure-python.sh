#!/usr/bin/env bash
# Make sure `$1 -m venv` works. A fresh Debian 12 has python3 but not its venv module
# (package python3-venv); install it when we are root, say what to do otherwise.
set -euo pipefail
PY=${1:-python3}
if "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "[ensure-python] installing python3-venv python3-dev"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3-venv python3-dev >/dev/null
  exit 0
fi
echo "[ensure-python] $PY has no venv/ensurepip: install python3-venv (sudo apt-get install python3-venv)" >&2
exit 1
