#!/usr/bin/env bash
# A Ray head on 127.0.0.1 for local `ray job submit` runs, with token auth, stopped by its own
# PIDs: its process group and their children (`ray stop` would kill every Ray process on the
# host, other clusters too).
#
#   cluster/local_head.sh start|stop|status|env
#   eval "$(cluster/local_head.sh env)"    # then: ray job submit --working-dir . -- python jobs/...
#
# Env: TRAPPM_RAY_DIR (state, /tmp/trappm-ray-head), TRAPPM_RAY_PORT (GCS, 6390),
#      TRAPPM_DASHBOARD_PORT (job API, 8275), TRAPPM_AGENT_PORT (dashboard agent HTTP, 52375),
#      TRAPPM_CLIENT_PORT (Ray client, 23001), TRAPPM_RAY_CPUS (default: all).
# Jobs inherit the environment of `start` (AWS_* for S3): credentials never travel in the job
# spec, where `ray job list` would show them.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${TRAPPM_RAY_DIR:-/tmp/trappm-ray-head}
PORT=${TRAPPM_RAY_PORT:-6390}
DASH=${TRAPPM_DASHBOARD_PORT:-8275}
# Ray's default agent port (52365) is shared by every Ray node on the host: when another cluster
# holds it, this head's agent starts without its HTTP server and every `ray job submit` fails
# with "No available agent to submit job" while `ray job list` (served by the dashboard) works.
AGENT=${TRAPPM_AGENT_PORT:-52375}
# Outside the worker port range (10002-19999), which Ray refuses to overlap.
CLIENT=${TRAPPM_CLIENT_PORT:-23001}
RAY=$(command -v "${RAY:-.venv/bin/ray}") || { echo "no ray executable" >&2; exit 1; }
BIN=$(cd "$(dirname "$RAY")" && pwd)
TOKEN=$DIR/auth_token
START_TIMEOUT=${TRAPPM_RAY_START_TIMEOUT:-600}

listening() { [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]; }

# `ray job ...` against this head, whatever the caller's environment says.
jobcli() {
    env -u RAY_AUTH_TOKEN RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$TOKEN" \
        RAY_ADDRESS="http://127.0.0.1:$DASH" "$RAY" job "$@"
}

# The head's process group and its descendants (Ray puts each worker in a group of its own),
# only while a group member still names DIR (a pgid number is free for reuse once the group is
# empty).
pids() {
    [[ -f $DIR/pgid ]] || return 0
    local g p ours=0
    g=$(cat "$DIR/pgid")
    [[ $g =~ ^[0-9]+$ ]] || return 0
    for p in $(ps -eo pid=,pgid= | awk -v g="$g" '$2 == g {print $1}'); do
        { tr '\0' ' ' <"/proc/$p/cmdline"; } 2>/dev/null | grep -qF -- "$DIR" && ours=1
    done
    ((ours)) || return 0
    ps -eo pid=,ppid=,pgid= | awk -v g="$g" '
        { parent[$1] = $2; if ($3 == g) keep[$1] = 1 }
        END {
            do { grew = 0
                 for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; grew = 1 }
            } while (grew)
            for (p in keep) printf "%s ", p
        }'
}

# Those of the given pids still running (zombies excluded).
living() {
    local x
    for x; do
        grep -qs '^State:[[:space:]]*[^Z]' "/proc/$x/status" && printf '%s ' "$x"
    done
    return 0
}

stop() {
    local p i
    p=$(pids)
    [[ -z $p ]] && { rm -f "$DIR/pgid"; echo "not running"; return 0; }
    # The list is taken once: workers whose raylet dies are re-parented and would drop out.
    kill -TERM $p 2>/dev/null || true
    # gcs_server and raylet can sit on SIGTERM for 15+ s on a loaded host; the state is throwaway.
    for ((i = 0; i < 25; i++)); do [[ -z $(living $p) ]] && break; sleep 0.2; done
    p=$(living $p)
    [[ -n $p ]] && kill -KILL $p 2>/dev/null || true
    for ((i = 0; i < 25; i++)); do [[ -z $(living $p) ]] && break; sleep 0.2; done
    rm -f "$DIR/pgid"
    echo "stopped"
}

start() {
    if [[ -n $(pids) ]]; then echo "already running"; return 0; fi
    local p
    for p in "$PORT" "$DASH" "$AGENT" "$CLIENT"; do
        # The dashboard silently moves to another port when its own is taken; refuse instead.
        listening "$p" && { echo "port $p is in use (see the TRAPPM_*_PORT variables)" >&2; exit 1; }
    done
    mkdir -p "$DIR"
    # A token of this head's own, not ~/.ray/auth_token, which other local clusters may use.
    if [[ ! -s $TOKEN ]]; then
        (umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TOKEN")
    fi
    # setsid: every process the head spawns (workers too) shares one new process group, which
    # is what `stop` kills. PATH: `python` in a job's entrypoint must be this venv's.
    # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps the servers on 127.0.0.1 (trappm_ray/ray_init.py).
    # RAY_AUTH_TOKEN would take precedence over the token file, RAY_ADDRESS over --head. The
    # dashboard gets as long as the whole start: on a loaded host its imports alone outlast
    # Ray's 60 s and `ray start` then fails.
    env -u RAY_AUTH_TOKEN -u RAY_ADDRESS PATH="$BIN:$PATH" RAY_AUTH_MODE=token \
        RAY_AUTH_TOKEN_PATH="$TOKEN" RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 \
        RAY_DASHBOARD_STARTUP_TIMEOUT_S="$START_TIMEOUT" \
        setsid bash -c 'echo $$ >"$1/pgid"; shift; exec "$@"' _ "$DIR" \
        "$RAY" start --head --node-ip-address 127.0.0.1 --port "$PORT" \
        --dashboard-host 127.0.0.1 --dashboard-port "$DASH" --include-dashboard true \
        --dashboard-agent-listen-port "$AGENT" --ray-client-server-port "$CLIENT" \
        --temp-dir "$DIR" ${TRAPPM_RAY_CPUS:+--num-cpus "$TRAPPM_RAY_CPUS"} --disable-usage-stats \
        >"$DIR/start.log" 2>&1 || { tail -n 30 "$DIR/start.log" >&2; stop >/dev/null; exit 1; }
    # Ready = a job ran. `ray job list` alone is answered by the dashboard even while the agent
    # that runs jobs is down (how "No available agent" went unnoticed), and the first submission
    # pays for the agent's job manager and the first worker: on a loaded host that exceeded the
    # dashboard's 300 s request timeout, so it is paid here, with retries, instead.
    local deadline=$((SECONDS + START_TIMEOUT)) id="ready-$$-$RANDOM" state
    while :; do
        state=$(jobcli status "$id" 2>&1 || true)
        [[ $state == *"Job '$id' succeeded"* ]] && break
        if [[ $state == *"Job '$id' failed"* || $state == *"Job '$id' was stopped"* ]]; then
            echo "head up, but a no-op job failed: $state" >&2; stop >/dev/null; exit 1
        fi
        if [[ $state == *"does not exist"* ]] && listening "$AGENT"; then
            jobcli submit --no-wait --submission-id "$id" -- true >/dev/null 2>&1 || true
        fi
        if ((SECONDS >= deadline)); then
            echo "head not ready after ${START_TIMEOUT}s; logs in $DIR/session_latest/logs" >&2
            stop >/dev/null
            exit 1
        fi
        sleep 3
    done
    echo "ray head up: job API http://127.0.0.1:$DASH (eval \"\$($0 env)\")"
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) [[ -n $(pids) ]] && echo "running" || { echo "not running"; exit 1; } ;;
env)
    # The token's path, never the token itself.
    echo "export RAY_ADDRESS=http://127.0.0.1:$DASH"
    echo "export RAY_DASHBOARD_ADDRESS=http://127.0.0.1:$DASH"   # read by `serve deploy`
    echo "export RAY_AUTH_MODE=token"
    echo "export RAY_AUTH_TOKEN_PATH=$TOKEN"
    echo "unset RAY_AUTH_TOKEN"   # it would override the file
    ;;
*)
    echo "usage: $0 start|stop|status|env" >&2; exit 2 ;;
esac
