#!/usr/bin/env bash
# A Ray head on 127.0.0.1 for local `ray job submit` runs, stopped by its own PIDs
# (`ray stop` would kill every Ray process on the host, other users' clusters too).
#
#   cluster/local_head.sh start|stop|status|env
#
# Env: TRAPPM_RAY_DIR (state, /tmp/trappm-ray-head), TRAPPM_RAY_PORT (GCS, 6390),
#      TRAPPM_DASHBOARD_PORT (job API, 8275), TRAPPM_RAY_CPUS (default: all).
# Token auth stays on (Ray's default); `env` prints what `ray job submit` needs.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${TRAPPM_RAY_DIR:-/tmp/trappm-ray-head}
PORT=${TRAPPM_RAY_PORT:-6390}
DASH=${TRAPPM_DASHBOARD_PORT:-8275}
RAY=${RAY:-.venv/bin/ray}

pids() { pgrep -f -- "$DIR" || true; }

case ${1:-} in
start)
    if [[ -n $(pids) ]]; then echo "already running"; exit 0; fi
    mkdir -p "$DIR"
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "$RAY" start --head --node-ip-address 127.0.0.1 \
        --port "$PORT" --dashboard-host 127.0.0.1 --dashboard-port "$DASH" --include-dashboard true \
        --temp-dir "$DIR" ${TRAPPM_RAY_CPUS:+--num-cpus "$TRAPPM_RAY_CPUS"} --disable-usage-stats \
        >"$DIR/start.log" 2>&1 || { tail -n 30 "$DIR/start.log" >&2; exit 1; }
    # The job API answers only once the dashboard agent is up (seconds later on a busy host).
    for _ in $(seq 120); do
        RAY_AUTH_MODE=token RAY_ADDRESS=http://127.0.0.1:$DASH "$RAY" job list >/dev/null 2>&1 && break
        sleep 1
    done
    echo "ray head up: job API http://127.0.0.1:$DASH"
    ;;
stop)
    p=$(pids)
    [[ -z $p ]] && { echo "not running"; exit 0; }
    kill $p 2>/dev/null || true
    for _ in $(seq 50); do [[ -z $(pids) ]] && break; sleep 0.2; done
    p=$(pids); [[ -n $p ]] && kill -9 $p 2>/dev/null || true
    echo "stopped"
    ;;
status)
    [[ -n $(pids) ]] && echo "running" || { echo "not running"; exit 1; }
    ;;
env)
    echo "export RAY_ADDRESS=http://127.0.0.1:$DASH"
    echo "export RAY_AUTH_MODE=token"
    ;;
*)
    echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
