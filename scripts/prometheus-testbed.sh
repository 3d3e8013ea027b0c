#!/usr/bin/env bash
# A throw-away Prometheus server (Debian's `prometheus` package) for Mirage's tests.
#
#   prometheus-testbed.sh install
#       apt-get install the package if it is missing. The Debian service is never started:
#       without systemd as PID 1 postinst cannot start it, and a policy-rc.d that answers
#       101 ("action forbidden") is put in place for the install when there is none.
#   prometheus-testbed.sh run PORT TARGET DIR
#       install if needed, write DIR/prometheus.yml (one job "mirage" scraping TARGET,
#       host:port, every second) and exec prometheus in the foreground on 127.0.0.1:PORT
#       with its TSDB in DIR/data. The caller stops it (SIGTERM to this pid).
set -euo pipefail

die() { echo "prometheus-testbed.sh: $*" >&2; exit 1; }

install_prometheus() {
  command -v prometheus > /dev/null && return 0
  if [ "$(id -u)" != 0 ]; then
    command -v sudo > /dev/null && sudo -n true 2> /dev/null \
      && exec sudo -n -E "$0" install
    die "prometheus is not installed and installing it needs root"
  fi
  export DEBIAN_FRONTEND=noninteractive
  local guard=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    # invoke-rc.d consults this: 101 keeps postinst from starting the packaged service
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    guard=/usr/sbin/policy-rc.d
  fi
  local log=/tmp/mirage-prometheus-apt.log rc=0
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; } \
    > "$log" 2>&1 || rc=$?
  [ -z "$guard" ] || rm -f "$guard"
  [ "$rc" = 0 ] || { tail -20 "$log" >&2; die "apt-get install prometheus failed"; }
  command -v prometheus > /dev/null || die "prometheus not on PATH after installing it"
}

case "${1:-}" in
  install)
    install_prometheus
    ;;
  run)
    [ $# = 4 ] || die "usage: $0 run PORT TARGET DIR"
    port=$2 target=$3 dir=$4
    install_prometheus
    mkdir -p "$dir/data"
    cat > "$dir/prometheus.yml" << EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mirage
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ["$target"]
EOF
    exec prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
      --web.listen-address="127.0.0.1:$port" --log.level=warn
    ;;
  *)
    die "usage: $0 install | run PORT TARGET DIR"
    ;;
esac
