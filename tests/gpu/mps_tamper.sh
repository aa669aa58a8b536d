#!/usr/bin/env bash
# A root client changes its MPS server's share and pinned limit; nvidia-mps puts them right
# (issue 40 item 2):  tests/gpu/mps_tamper.sh [LOG_DIR]
# On a GPU host with the MPS binaries (nvidia-cuda-mps-control on PATH or in /usr/local/nvidia/bin)
# and python3 with PyTorch, nvidia-ml-py and PyYAML, run as root (what a container without a user
# namespace is). Uses GPU 0 (GPU=<index> picks another), nvidia-mps of this tree
# (python3 -m vgpu_components.mps) on temporary folders, and tests/gpu/compute_share.py's client.
#   1. nvidia-mps starts allocation A's daemon at 25 % and 2048 MiB; a client holding 1024 MiB
#      makes it start a server. INFO: the daemon's raw answers to the per-server queries (the
#      formats nvidia-mps reads: get_server_list, get_active_thread_percentage <PID>,
#      get_device_pinned_mem_limit <PID> 0, get_default_device_pinned_mem_limit 0);
#   2. root sets that server's share to 100 and its pinned limit to 97G through the control socket,
#      as the root container did on the H200; within three probes nvidia-mps logs it, sets them
#      back and shuts the server down; a new client is refused 3072 MiB (2048 MiB holds again);
#   3. root quits the daemon: nvidia-mps starts it again with 25 % and 2048 MiB as its defaults;
#   4. INFO: a client in a user namespace (unshare --user --map-root-user): does the daemon take its
#      control commands, and does its CUDA go through MPS (its root is the host's uid 0 here: not what hostUsers: false gives a pod, whose root is an unprivileged host uid).
#   5. INFO: the same control command as an unprivileged host uid (65534), as a hostUsers: false
#      pod's root would send it: is it refused?
# Prints PASS/FAIL/INFO lines and "N passed, N failed" last; exits 1 on any FAIL. About a minute.
# Written for issue 40; run on the H200 2026-12-05 (docs/testing.md).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/mps-tamper.log
: >"$LOG"
PATH=$PATH:/usr/local/nvidia/bin
PY=${PYTHON:-python3}
GPU=${GPU:-0}
PROBE_S=2
JOB=$HERE/compute_share.py
passed=0
failed=0
say() { echo "$*" | tee -a "$LOG"; }
pass() { say "PASS $1"; passed=$((passed + 1)); }
fail() { say "FAIL $1"; failed=$((failed + 1)); }
finish() { say "$passed passed, $failed failed"; [[ $failed == 0 ]]; exit $?; }

[[ $(id -u) == 0 ]] || { fail "prerequisite: run as root (the attacker is root)"; finish; }
for tool in nvidia-smi nvidia-cuda-mps-control "$PY"; do
    command -v "$tool" >/dev/null || { fail "prerequisite: $tool not found"; finish; }
done
GPU_UUID=$(nvidia-smi -i "$GPU" --query-gpu=uuid --format=csv,noheader 2>>"$LOG")
[[ $GPU_UUID == GPU-* ]] || { fail "prerequisite: no UUID for GPU $GPU"; finish; }
export CUDA_VISIBLE_DEVICES=$GPU_UUID PYTHONUNBUFFERED=1
unset LD_PRELOAD CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
export PYTHONPATH=$ROOT/files/components/src${PYTHONPATH:+:$PYTHONPATH}

TMP=$(mktemp -d /tmp/vgpu-mps-tamper.XXXX)
STATE=$TMP/state
PIPES=$TMP/mps
A=00000000000000a1
PIPE=$PIPES/$A
MANAGER_PID=
CLIENT_PID=
stop_manager() { # nvidia-mps quits its daemons on SIGTERM
    [[ -n $CLIENT_PID ]] && kill "$CLIENT_PID" 2>/dev/null
    CLIENT_PID=
    [[ -n $MANAGER_PID ]] || return 0
    kill -TERM "$MANAGER_PID" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$MANAGER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$MANAGER_PID" 2>/dev/null
    MANAGER_PID=
}
trap 'stop_manager; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

ask() { echo "$1" | CUDA_MPS_PIPE_DIRECTORY=$PIPE nvidia-cuda-mps-control 2>>"$LOG"; }
field() { "$PY" -c 'import json, sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1"; }
alloc() { # MiB: a client through allocation A's daemon; prints allocated (True/False)
    env CUDA_MPS_PIPE_DIRECTORY="$PIPE" timeout 60 "$PY" "$JOB" alloc "$1" 2>>"$LOG" | tail -n 1 | field allocated 2>>"$LOG"
}

env VGPU_STATE_DIR="$STATE" VGPU_MPS_PIPE_DIR="$PIPES" VGPU_MPS_LOG_DIR="$PIPES/log" VGPU_MPS_PROBE_INTERVAL_S=$PROBE_S \
    VGPU_MPS_HEALTHZ_PORT=0 VGPU_LOG_FORMAT=text CUDA_VISIBLE_DEVICES= \
    "$PY" -m vgpu_components.mps --config "$TMP/none.yaml" >"$TMP/nvidia-mps.log" 2>&1 &
MANAGER_PID=$!
"$PY" - "$STATE" "$PIPES" "$GPU_UUID" "$A" <<'PYTHON' >>"$LOG" 2>&1 || { fail "nvidia-mps did not start allocation $A's daemon (see $LOG)"; finish; }
import sys
from vgpu_components import mps_requests
state, pipes, gpu, alloc_id = sys.argv[1:]
request = mps_requests.MpsRequest(alloc_id, gpu, 25, 2048, mps_requests.new_serial())
mps_requests.write_request(state, request)
mps_requests.wait_ready(pipes, request, timeout_s=60)
PYTHON
pass "nvidia-mps started allocation $A's daemon at 25 % and 2048 MiB"

# --- 1. a server, and the daemon's answers as they are ---------------------------------------------
env CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$PY" "$JOB" alloc 1024 60 >"$TMP/client.out" 2>>"$LOG" &
CLIENT_PID=$!
for _ in $(seq 300); do [[ -s $TMP/client.out ]] && break; sleep 0.1; done
SERVER=$(ask get_server_list | head -n 1 | tr -d '[:space:]')
[[ $SERVER =~ ^[0-9]+$ ]] || { fail "no MPS server for the client (get_server_list: '$SERVER'; see $LOG)"; finish; }
say "INFO get_server_list: $SERVER"
say "INFO get_active_thread_percentage $SERVER: $(ask "get_active_thread_percentage $SERVER")"
say "INFO get_device_pinned_mem_limit $SERVER 0: $(ask "get_device_pinned_mem_limit $SERVER 0")"
say "INFO get_default_device_pinned_mem_limit 0: $(ask 'get_default_device_pinned_mem_limit 0')"

# --- 2. root changes its server; nvidia-mps puts it right -------------------------------------------
ask "set_active_thread_percentage $SERVER 100" >>"$LOG"
ask "set_device_pinned_mem_limit $SERVER 0 97G" >>"$LOG"
say "INFO after root's change: $(ask "get_active_thread_percentage $SERVER") %, $(ask "get_device_pinned_mem_limit $SERVER 0")"
gone=0
for _ in $(seq $((PROBE_S * 30))); do
    ask get_server_list | grep -qx "$SERVER" || { gone=1; break; }
    sleep 0.1
done
if [[ $gone == 1 ]] && grep -q "MPS server $SERVER of allocation $A" "$TMP/nvidia-mps.log"; then
    pass "the changed server $SERVER was set back and shut down, and nvidia-mps logged it"
else
    fail "server $SERVER still runs or was not logged (see $TMP/nvidia-mps.log, copied to $LOG)"
fi
kill "$CLIENT_PID" 2>/dev/null
wait "$CLIENT_PID" 2>/dev/null
CLIENT_PID=
if [[ $(alloc 3072) == False ]]; then pass "a new client is refused 3072 MiB: the 2048 MiB limit holds again"; else
    fail "a new client got 3072 MiB past the 2048 MiB limit"
fi

# --- 3. root quits the daemon; nvidia-mps starts it again with its defaults ---------------------------
ask quit >>"$LOG"
back=0
for _ in $(seq 300); do
    # the daemon of driver 580 answers a limit of 2048 MiB as "2G" (seen on the H200)
    if [[ $(ask get_default_active_thread_percentage) == 25* && $(ask 'get_default_device_pinned_mem_limit 0') =~ ^(2G|2048M?)$ ]]; then
        back=1
        break
    fi
    sleep 0.1
done
if [[ $back == 1 ]]; then pass "the daemon root quit is running again at 25 % and 2048 MiB"; else
    fail "the daemon did not come back with its defaults within 30 s"
fi

# --- 4. the same from a user namespace ---------------------------------------------------------------
if command -v unshare >/dev/null; then
    say "INFO from a user namespace, set_default_active_thread_percentage 100: $(echo 'set_default_active_thread_percentage 100' \
        | CUDA_MPS_PIPE_DIRECTORY=$PIPE unshare --user --map-root-user nvidia-cuda-mps-control 2>&1)"
    say "INFO the default after it: $(ask get_default_active_thread_percentage)"
    say "INFO a CUDA client in a user namespace: $(env CUDA_MPS_PIPE_DIRECTORY="$PIPE" unshare --user --map-root-user \
        timeout 60 "$PY" "$JOB" alloc 1024 2>>"$LOG" | tail -n 1); servers now: $(ask get_server_list | tr '\n' ' ')"
fi

# --- 5. INFO: the same as an unprivileged host uid (what the root of a hostUsers: false pod is) -------
if command -v setpriv >/dev/null; then
    say "INFO the pipe folder: $(find "$PIPE" -maxdepth 1 -printf '%M %U:%G %p; ' 2>&1)"
    say "INFO as host uid 65534, set_default_active_thread_percentage 100: $(echo 'set_default_active_thread_percentage 100' \
        | CUDA_MPS_PIPE_DIRECTORY=$PIPE setpriv --reuid=65534 --regid=65534 --clear-groups nvidia-cuda-mps-control 2>&1 | tr '\n' ' ')"
    say "INFO the default after it: $(ask get_default_active_thread_percentage)"
fi
stop_manager
cat "$TMP/nvidia-mps.log" >>"$LOG"
finish
