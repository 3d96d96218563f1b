#!/usr/bin/env bash
# Throwaway S3 server for the end-to-end tests: one Ceph monitor, one memstore
# OSD and radosgw, all on 127.0.0.1, all state (conf, data, pids, logs) in DIR.
#
#   scripts/s3_server.sh start|stop|status|env [DIR]     (DIR: /tmp/trappm-s3)
#
# Env: TRAPPM_S3_PORT (radosgw, 7480), TRAPPM_S3_MON_PORT (monitor, 6789).
# The S3 keys below are fixed throwaway test credentials, not secrets.
set -euo pipefail

CMD=${1:-}
DIR=${2:-/tmp/trappm-s3}
PORT=${TRAPPM_S3_PORT:-7480}
MON_PORT=${TRAPPM_S3_MON_PORT:-6789}
ACCESS_KEY=trappm-test
SECRET_KEY=trappm-test-secret
BUCKET=trappm
URL="http://127.0.0.1:$PORT"
START_TIMEOUT=90
export CEPH_CONF="$DIR/ceph.conf"

log() { echo "s3_server: $*" >&2; }

answering() { curl -s -o /dev/null --max-time 2 "$URL"; }

# The ceph CLI retries forever when no monitor answers; bound every call.
ceph_() { timeout 60 ceph --connect-timeout 30 "$@"; }

new_uuid() { uuidgen 2>/dev/null || python3 -c 'import uuid; print(uuid.uuid4())'; }

# DIR is rm -rf'ed: only ever remove one that this script created.
wipe_dir() {
    [[ -e $DIR ]] || return 0
    if [[ ! -f $DIR/ceph.conf && -n $(ls -A "$DIR") ]]; then
        log "ERROR: $DIR exists and is not an s3_server.sh cluster; not touching it"
        exit 1
    fi
    kill_daemons
    rm -rf "$DIR"
}

install_packages() {
    command -v radosgw >/dev/null && return 0
    log "installing Ceph packages (apt) ..."
    local out
    out=$(mktemp)
    export DEBIAN_FRONTEND=noninteractive
    # apt is chatty even with -qq; show its output only on failure.
    if ! { apt-get -qq update && apt-get -qq install -y --no-install-recommends \
        ceph-mon ceph-osd radosgw ceph-common; } >"$out" 2>&1; then
        tail -n 30 "$out" >&2
        rm -f "$out"
        log "ERROR: apt-get install failed"
        exit 1
    fi
    rm -f "$out"
}

# Kill only the daemons whose pid files are in DIR, and only if the pid still
# belongs to a Ceph daemon (guards against pid reuse after a crash/reboot).
kill_daemons() {
    local f pid pids=()
    for f in "$DIR"/run/*.pid; do
        [[ -f $f ]] || continue
        pid=$(cat "$f")
        [[ $pid =~ ^[0-9]+$ ]] || continue
        case $(cat "/proc/$pid/comm" 2>/dev/null) in
            ceph-mon|ceph-osd|radosgw) kill "$pid" 2>/dev/null && pids+=("$pid") ;;
        esac
    done
    # radosgw takes 6-11 s to honour SIGTERM; the state is throwaway, so
    # SIGKILL whatever is left after a 3 s grace.
    local i alive
    for ((i = 0; i < 50; i++)); do
        alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        ((${#alive[@]} == 0)) && return 0
        pids=("${alive[@]}")
        ((i == 15)) && kill -9 "${pids[@]}" 2>/dev/null || true
        sleep 0.2
    done
    log "warning: could not kill pids ${pids[*]}"
}

# A mon still settling its first maps can answer a command with EAGAIN (a CI start failed
# once on crush add); try again, keeping each refusal in the log.
retry() {
    local i
    for ((i = 1; i <= 5; i++)); do
        "$@" >>"$DIR/log/commands.log" 2>&1 && return 0
        echo "attempt $i of '$*' failed" >>"$DIR/log/commands.log"
        sleep $i
    done
    return 1
}

dump_logs() {
    log "---- ceph -s ----"
    timeout 15 ceph --connect-timeout 10 -s >&2 2>&1 || true
    local f
    for f in "$DIR"/log/*; do
        [[ -f $f ]] || continue
        log "---- tail $f ----"
        tail -n 25 "$f" >&2
    done
}

# Leave no half-started daemons holding the ports; keep DIR for post-mortems.
fail() {
    log "ERROR: $*"
    dump_logs
    kill_daemons
    log "daemons stopped; logs kept in $DIR/log"
    log "free disk: $(df -h "$DIR" 2>/dev/null | awk 'NR==2{print $4" of "$2}')"
    log "ERROR: $*"  # again, last: a CI log shows its tail
    exit 1
}

write_conf() {
    # Every path Ceph would otherwise put under /var/{lib,run,log}/ceph is
    # redirected into DIR so that runs never collide with a system install.
    cat >"$CEPH_CONF" <<EOF
[global]
fsid = $(new_uuid)
mon host = v1:127.0.0.1:$MON_PORT
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind msgr2 = false
auth cluster required = none
auth service required = none
auth client required = none
keyring = $DIR/keyring
run dir = $DIR/run
admin socket = $DIR/run/\$name.asok
pid file = $DIR/run/\$name.pid
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
# The mon stops itself below 5% free disk (warns <30%); test boxes run fuller (a CI machine was
# seen with 0.1% free): its store is a few MB, the OSD keeps objects in RAM.
mon data avail warn = 1
mon data avail crit = 0
crash dir = $DIR/crash
mon data = $DIR/mon/\$id
osd data = $DIR/osd/\$id
osd objectstore = memstore
# Placed in CRUSH by this script instead: the OSD's own start-up crush/class
# update races its first monmap and fails ~1 in 2 starts with 'wrong fsid'.
osd crush update on start = false
osd class update on start = false
# memstore keeps objects in RAM; the OSD blocks writes once ~95% of this is used.
memstore device bytes = 4294967296
# One OSD: size-1 pools, no host-level failure domain, few PGs (radosgw
# creates ~8 pools at start and would hit the per-OSD PG limit otherwise).
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
osd pool default pg num = 8
osd pool default pg autoscale mode = off
mon max pg per osd = 1000
# Single mon: no need to batch map updates (1 s default); pool creation is faster.
paxos propose interval = 0.1
[client.rgw.a]
rgw frontends = beast endpoint=127.0.0.1:$PORT
rgw data = $DIR/rgw
EOF
}

start() {
    local t0=$SECONDS
    if answering; then echo "already running ($URL)"; return 0; fi
    install_packages
    [[ -e $DIR ]] && log "wiping stale $DIR"
    wipe_dir
    mkdir -p "$DIR"/{run,log,crash,mon/a,osd/0,rgw}
    write_conf

    # Even with auth off, ceph-mon --mkfs insists on a keyring holding mon.
    ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. \
        --cap mon 'allow *' >/dev/null
    # --addv: plain --add guesses msgr v2 for any port but 6789.
    monmaptool --create --fsid "$(awk '/^fsid/{print $3}' "$CEPH_CONF")" \
        --addv a "[v1:127.0.0.1:$MON_PORT]" "$DIR/monmap" >/dev/null
    ceph-mon --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
        2>>"$DIR/log/daemons.err" || fail "ceph-mon --mkfs failed"
    ceph-mon -i a 2>>"$DIR/log/daemons.err" || fail "ceph-mon did not start"

    local osd_uuid
    osd_uuid=$(new_uuid)
    # A monitor a moment old can refuse its first command (EPERM: "problem getting command
    # descriptions from mon": a clean-clone CI run on 2026-12-01); with the same uuid a retried
    # osd new returns the same id.
    local i id=
    for ((i = 1; i <= 5; i++)); do
        id=$(ceph_ osd new "$osd_uuid" 2>>"$DIR/log/commands.log") && [[ $id == 0 ]] && break
        echo "attempt $i of 'ceph osd new' answered '$id'" >>"$DIR/log/commands.log"
        sleep "$i"
    done
    [[ $id == 0 ]] || fail "ceph osd new did not return id 0"
    ceph-osd -i 0 --mkfs --osd-uuid "$osd_uuid" 2>>"$DIR/log/daemons.err" \
        || fail "ceph-osd --mkfs failed"
    # chooseleaf type 0 lets the OSD sit right under the root, no host bucket.
    retry ceph_ osd crush add osd.0 1.0 root=default || fail "ceph osd crush add failed"
    ceph-osd -i 0 2>>"$DIR/log/daemons.err" || fail "ceph-osd did not start"
    radosgw -n client.rgw.a 2>>"$DIR/log/daemons.err" || fail "radosgw did not start"

    local deadline=$((SECONDS + START_TIMEOUT))
    until answering; do
        ((SECONDS < deadline)) || fail "radosgw not answering on $URL after ${START_TIMEOUT}s"
        sleep 0.5
    done

    radosgw-admin user create --uid=trappm --display-name="trappm tests" \
        --access-key="$ACCESS_KEY" --secret="$SECRET_KEY" >/dev/null \
        || fail "radosgw-admin user create failed"
    # curl signs SigV4 itself, so no Python/boto3 is needed for the bucket.
    curl -sSf -o /dev/null -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
        --user "$ACCESS_KEY:$SECRET_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" \
        "$URL/$BUCKET" || fail "could not create bucket $BUCKET"
    echo "S3 server up at $URL (bucket $BUCKET, dir $DIR) in $((SECONDS - t0))s"
}

stop() {
    [[ -d $DIR ]] || { echo "not running (no $DIR)"; return 0; }
    wipe_dir
    echo "stopped"
}

print_env() {
    cat <<EOF
export AWS_ACCESS_KEY_ID=$ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$SECRET_KEY
export AWS_ENDPOINT_URL=$URL
export AWS_DEFAULT_REGION=us-east-1
export AWS_REQUEST_CHECKSUM_CALCULATION=WHEN_REQUIRED
export AWS_RESPONSE_CHECKSUM_VALIDATION=WHEN_REQUIRED
export TRAPPM_S3_BUCKET=$BUCKET
EOF
}

case $CMD in
    start) start ;;
    stop) stop ;;
    status) if answering; then echo "running ($URL)"; else echo "not running"; exit 1; fi ;;
    env) print_env ;;
    *) echo "usage: $0 start|stop|status|env [DIR]" >&2; exit 2 ;;
esac
