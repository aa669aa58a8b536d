#!/usr/bin/env bash
# Compute shares under MPS, measured (issues 16 and 28):  tests/gpu/compute_share.sh [LOG_DIR]
# On a GPU host with the MPS binaries (nvidia-cuda-mps-control on PATH or in /usr/local/nvidia/bin)
# and python3 with PyTorch, nvidia-ml-py and PyYAML. Uses GPU 0 (GPU=<index> picks another) and
# private MPS control daemons on temporary pipe and log folders; it changes no GPU setting (compute
# mode checked before and after) and stops the daemons it started, also on failure or interrupt.
#   1. a compute-bound kernel (bf16 8192^3 torch.matmul) alone without MPS: the baseline, TFLOP/s;
#      two processes without MPS (time-slicing), for comparison;
#   2. the same invocation under MPS with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE 100, 50, 25 (the
#      container's share), as ratios to alone;
#   3. two processes at 50 % each, concurrently (their timed parts start together);
#   4. with CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M and libvgpu absent, the driver allows a
#      3072 MiB allocation and refuses a 5120 MiB one; without the variable 5120 MiB is allowed;
#   5. nvidia-mps itself (python3 -m vgpu_components.mps of this tree) with the request of one
#      allocation at 25 % and a 2048 MiB quota, as the device plugin writes it: its own daemon, and
#      a client that asks CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100, or unsets the variable, stays at
#      0.4 of the GPU alone at most; a client asking CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M is
#      refused 3072 MiB and given 1024; a second allocation at 50 % beside it (INFO: the two servers
#      time-slice); a client that skips MPS beside it (INFO: what it gets, and where NVML lists it);
#      the request removed: the daemon quits and its pipe folder goes.
# Prints the numbers, PASS/FAIL lines and "N passed, N failed" last; exits 1 on any FAIL.
# About 3 minutes (BENCH_S=3 seconds per timed run). Log: LOG_DIR/compute-share.log.
# SECTIONS=5 runs the baseline and section 5 only (about a minute: a short device budget).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/compute-share.log
: >"$LOG"
PATH=$PATH:/usr/local/nvidia/bin
PY=${PYTHON:-python3}
GPU=${GPU:-0}
BENCH_S=${BENCH_S:-3}
LIMIT_MIB=4096
SECTIONS=${SECTIONS:-all}
[[ $SECTIONS =~ ^(all|5)$ ]] || { echo "SECTIONS=$SECTIONS: expected all or 5" >&2; exit 2; }
JOB=$HERE/compute_share.py
passed=0
failed=0
say() { echo "$*" | tee -a "$LOG"; }
pass() { say "PASS $1"; passed=$((passed + 1)); }
fail() { say "FAIL $1"; failed=$((failed + 1)); }
finish() { say "$passed passed, $failed failed"; [[ $failed == 0 ]]; exit $?; }

for tool in nvidia-smi nvidia-cuda-mps-control "$PY"; do
    command -v "$tool" >/dev/null || { fail "prerequisite: $tool not found"; finish; }
done
"$PY" -c 'import torch; assert torch.cuda.is_available()' >>"$LOG" 2>&1 \
    || { fail "prerequisite: PyTorch with CUDA (see $LOG)"; finish; }

MODE_BEFORE=$(nvidia-smi -i "$GPU" --query-gpu=compute_mode --format=csv,noheader 2>>"$LOG")
say "GPU $GPU: $(nvidia-smi -i "$GPU" --query-gpu=name,driver_version --format=csv,noheader 2>>"$LOG"), compute mode $MODE_BEFORE"

# Every client and the daemon see one GPU, by UUID (the MPS server renumbers the devices it sees,
# so an index would name another device for a client); libvgpu is kept out (the driver's own
# limit is what is measured).
GPU_UUID=$(nvidia-smi -i "$GPU" --query-gpu=uuid --format=csv,noheader 2>>"$LOG")
[[ $GPU_UUID == GPU-* ]] || { fail "prerequisite: no UUID for GPU $GPU (got '$GPU_UUID')"; finish; }
export CUDA_VISIBLE_DEVICES=$GPU_UUID PYTHONUNBUFFERED=1
unset LD_PRELOAD CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
LD_LIBRARY_PATH=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v -e '/opt/vgpu' -e vgpu | paste -sd: -)
export LD_LIBRARY_PATH

TMP=$(mktemp -d /tmp/vgpu-compute-share.XXXX)
PIPE=$TMP/pipe
NO_MPS=$TMP/no-mps  # an empty pipe folder: a client finds no daemon there and runs without MPS
mkdir -p "$PIPE/log" "$NO_MPS"
MPS_STARTED=0
stop_mps() {
    [[ $MPS_STARTED == 1 ]] || return 0
    MPS_STARTED=0
    local pid
    pid=$(cat "$PIPE/nvidia-cuda-mps-control.pid" 2>/dev/null)
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$PIPE/log nvidia-cuda-mps-control >>"$LOG" 2>&1
    for _ in $(seq 100); do # the daemon removes its control socket as it exits
        if [[ -n $pid ]]; then kill -0 "$pid" 2>/dev/null || return 0; elif [[ ! -e $PIPE/control ]]; then return 0; fi
        sleep 0.1
    done
    say "warning: the MPS control daemon on $PIPE (pid ${pid:-unknown}) did not quit within 10 s; terminating it"
    [[ -n $pid ]] && kill "$pid" 2>/dev/null
}
trap 'stop_mps; rm -rf "$TMP"' EXIT
trap 'exit 130' INT TERM

field() { "$PY" -c 'import json, sys; print(json.loads(sys.stdin.readline())[sys.argv[1]])' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

# One timed run in a pipe folder, with extra env (VAR=value ...); prints TFLOP/s, or 0 on failure.
bench() {
    local pipe=$1 out
    shift
    out=$(env CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$pipe/log" "$@" \
        timeout 120 "$PY" "$JOB" bench "$BENCH_S" 2>>"$LOG" | tail -n 1)
    echo "bench $pipe $*: $out" >>"$LOG"
    printf '%s' "$out" | field tflops 2>>"$LOG" || echo 0
}

# Two runs at once whose timed parts start together; prints "TFLOP/s TFLOP/s".
bench_pair() {
    local pipe=$1 barrier out1 out2 pid1 pid2
    shift
    barrier=$(mktemp -d "$TMP/barrier.XXXX")
    env CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$pipe/log" "$@" \
        timeout 120 "$PY" "$JOB" bench "$BENCH_S" "$barrier" 2 >"$barrier/1.out" 2>>"$LOG" &
    pid1=$!
    env CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$pipe/log" "$@" \
        timeout 120 "$PY" "$JOB" bench "$BENCH_S" "$barrier" 2 >"$barrier/2.out" 2>>"$LOG" &
    pid2=$!
    wait "$pid1" "$pid2"
    out1=$(tail -n 1 "$barrier/1.out")
    out2=$(tail -n 1 "$barrier/2.out")
    echo "pair $pipe $*: $out1 / $out2" >>"$LOG"
    echo "$(printf '%s' "$out1" | field tflops 2>>"$LOG" || echo 0) $(printf '%s' "$out2" | field tflops 2>>"$LOG" || echo 0)"
}

# One allocation of $2 MiB in a pipe folder with extra env; prints the JSON line (empty on a crash).
alloc() {
    local pipe=$1 mib=$2
    shift 2
    env CUDA_MPS_PIPE_DIRECTORY="$pipe" CUDA_MPS_LOG_DIRECTORY="$pipe/log" "$@" \
        timeout 60 "$PY" "$JOB" alloc "$mib" 2>>"$LOG" | tail -n 1
}

check_alloc() { # name, want (true|false), JSON line
    local name=$1 want=$2 json=$3 got vgpu
    say "  $name: ${json:-no result}"
    got=$(printf '%s' "$json" | field allocated 2>>"$LOG")
    vgpu=$(printf '%s' "$json" | field libvgpu 2>>"$LOG")
    if [[ $vgpu != False ]]; then
        fail "$name: libvgpu was loaded or the client crashed (libvgpu=$vgpu; see $LOG)"
    elif [[ $got == True && $want == true ]]; then
        pass "$name: allowed"
    elif [[ $got == False && $want == false ]]; then
        pass "$name: refused by the driver"
    else
        fail "$name: allocated=$got, expected $want"
    fi
}

# --- 1. alone, without MPS ---------------------------------------------------------------------
ALONE=$(bench "$NO_MPS")
say "alone, no MPS: $ALONE TFLOP/s"
if within "$ALONE" 1 100000; then pass "baseline: the kernel ran alone ($ALONE TFLOP/s)"; else
    fail "baseline: the kernel did not run (see $LOG)"
    finish
fi
read -r TS1 TS2 <<<"$(bench_pair "$NO_MPS")"
say "two processes without MPS (time-slicing): $TS1 + $TS2 TFLOP/s ($(ratio "$TS1" "$ALONE") + $(ratio "$TS2" "$ALONE") of alone)"

if [[ $SECTIONS == all ]]; then
# --- 2. under MPS, one process at 100, 50, 25 % --------------------------------------------------
CUDA_MPS_PIPE_DIRECTORY=$PIPE CUDA_MPS_LOG_DIRECTORY=$PIPE/log nvidia-cuda-mps-control -d >>"$LOG" 2>&1 \
    || { fail "the MPS control daemon did not start (see $LOG)"; finish; }
MPS_STARTED=1
sleep 1
declare -A SHARE
for pct in 100 50 25; do
    SHARE[$pct]=$(bench "$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$pct)
    say "under MPS at $pct %: ${SHARE[$pct]} TFLOP/s, $(ratio "${SHARE[$pct]}" "$ALONE") of alone"
done
SERVERS=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$PIPE nvidia-cuda-mps-control 2>>"$LOG")
# The control daemon's log names each server it started (it may have stopped an idle one since).
STARTED=$(grep -ci 'new server\|server.*start' "$PIPE/log/control.log" 2>/dev/null)
if [[ -n $SERVERS || ${STARTED:-0} -gt 0 ]]; then pass "the clients ran through MPS (server ${SERVERS:-started, per control.log})"; else
    fail "no MPS server was started: the clients did not go through MPS (see $PIPE/log/control.log)"
fi
R100=$(ratio "${SHARE[100]}" "$ALONE")
R50=$(ratio "${SHARE[50]}" "$ALONE")
R25=$(ratio "${SHARE[25]}" "$ALONE")
# Bounds, not exact numbers: fewer SMs clock higher (measured on the H200: 1.00, 0.67, 0.35).
if within "$R100" 0.90 1.10; then pass "share 100 %: full speed ($R100 of alone)"; else
    fail "share 100 %: $R100 of alone, expected 0.90-1.10"
fi
if within "$R50" 0.40 0.85; then pass "share 50 %: held ($R50 of alone)"; else
    fail "share 50 %: $R50 of alone, expected 0.40-0.85"
fi
if within "$R25" 0.15 0.55 && awk -v a="$R25" -v b="$R50" 'BEGIN { exit !(a <= b - 0.1) }'; then
    pass "share 25 %: held ($R25 of alone, below 50 %'s $R50)"
else
    fail "share 25 %: $R25 of alone, expected 0.15-0.55 and below 50 %'s $R50 by 0.1"
fi

# --- 3. two processes at 50 % each, concurrently ---------------------------------------------------
read -r P1 P2 <<<"$(bench_pair "$PIPE" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50)"
Q1=$(ratio "$P1" "$ALONE")
Q2=$(ratio "$P2" "$ALONE")
SUM=$(awk -v a="$P1" -v b="$P2" 'BEGIN { printf "%.1f", a + b }')
BALANCE=$(awk -v a="$P1" -v b="$P2" 'BEGIN { lo = (a < b ? a : b); hi = (a < b ? b : a); printf "%.2f", (hi > 0 ? lo / hi : 0) }')
say "two processes at 50 % each under MPS: $P1 + $P2 TFLOP/s ($Q1 + $Q2 of alone; together $(ratio "$SUM" "$ALONE"))"
if within "$Q1" 0.35 0.85 && within "$Q2" 0.35 0.85 && within "$BALANCE" 0.80 1.00; then
    pass "two at 50 %: each got its half ($Q1, $Q2 of alone; balance $BALANCE)"
else
    fail "two at 50 %: $Q1 and $Q2 of alone (balance $BALANCE), expected each 0.35-0.85 and balance 0.80 or more"
fi

# --- 4. the driver's own memory limit (libvgpu absent) ----------------------------------------------
say "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${LIMIT_MIB}M, libvgpu absent:"
PINNED=CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=${LIMIT_MIB}M
check_alloc "pinned limit: 3072 MiB under the ${LIMIT_MIB} MiB limit" true "$(alloc "$PIPE" 3072 "$PINNED")"
check_alloc "pinned limit: 5120 MiB past the ${LIMIT_MIB} MiB limit" false "$(alloc "$PIPE" 5120 "$PINNED")"
check_alloc "no pinned limit: 5120 MiB (the control)" true "$(alloc "$PIPE" 5120)"
fi

# --- 5. nvidia-mps: an MPS daemon per allocation, its limits out of the client's reach --------------
stop_mps
STATE=$TMP/state
ROOTPIPE=$TMP/mps
MANAGER_PID=
stop_manager() {
    [[ -n $MANAGER_PID ]] || return 0
    kill -TERM "$MANAGER_PID" 2>/dev/null
    for _ in $(seq 200); do kill -0 "$MANAGER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$MANAGER_PID" 2>/dev/null && { say "warning: nvidia-mps did not stop within 20 s; killing it"; kill -KILL "$MANAGER_PID"; }
    MANAGER_PID=
}
trap 'stop_mps; stop_manager; rm -rf "$TMP"' EXIT
export PYTHONPATH=$ROOT/files/components/src${PYTHONPATH:+:$PYTHONPATH}
# request <alloc-id> <percent> <pinned MiB>: what the device plugin's Allocate writes, then waits for.
request() {
    "$PY" - "$STATE" "$ROOTPIPE" "$GPU_UUID" "$@" <<'PYTHON' >>"$LOG" 2>&1
import sys
from vgpu_components import mps
state, pipe, gpu, alloc_id, share, pinned = sys.argv[1:]
request = mps.MpsRequest(alloc_id, gpu, int(share), int(pinned), mps.new_serial())
mps.write_request(state, request)
mps.wait_ready(pipe, request, timeout_s=60)
print(f"allocation {alloc_id}: its daemon is ready ({share} %, {pinned} MiB)")
PYTHON
}
if ! "$PY" -c 'import vgpu_components.mps, yaml, pynvml' >>"$LOG" 2>&1; then
    fail "prerequisite: vgpu_components.mps of this tree imports (PyYAML, nvidia-ml-py; see $LOG)"
else
    env VGPU_STATE_DIR="$STATE" VGPU_MPS_PIPE_DIR="$ROOTPIPE" VGPU_MPS_LOG_DIR="$ROOTPIPE/log" \
        VGPU_MPS_HEALTHZ_PORT=0 VGPU_LOG_FORMAT=text CUDA_VISIBLE_DEVICES= \
        "$PY" -m vgpu_components.mps --config "$TMP/none.yaml" >>"$LOG" 2>&1 &
    MANAGER_PID=$!
    A=00000000000000a1
    B=00000000000000b2
    if request "$A" 25 2048; then
        pass "nvidia-mps started allocation $A's own daemon at 25 % and 2048 MiB"
        PIPE_A=$ROOTPIPE/$A
        for asked in 100 unset; do
            if [[ $asked == unset ]]; then got=$(bench "$PIPE_A"); else got=$(bench "$PIPE_A" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$asked); fi
            r=$(ratio "$got" "$ALONE")
            say "allocation at 25 %, the client asking ${asked/unset/nothing}: $got TFLOP/s, $r of alone"
            if within "$r" 0.05 0.40; then pass "share 25 % held against a client asking ${asked/unset/nothing} ($r of alone, at most 0.40)"; else
                fail "share 25 % against a client asking ${asked/unset/nothing}: $r of alone, expected 0.05-0.40"
            fi
        done
        say "allocation $A's daemon: pinned limit 2048 MiB; the client asks CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M:"
        check_alloc "daemon's pinned limit: 3072 MiB past 2048 MiB, the client asking 8192" false \
            "$(alloc "$PIPE_A" 3072 CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M)"
        check_alloc "daemon's pinned limit: 1024 MiB under 2048 MiB (the control)" true "$(alloc "$PIPE_A" 1024)"
        if request "$B" 50 4096; then
            barrier=$(mktemp -d "$TMP/barrier.XXXX")
            env CUDA_MPS_PIPE_DIRECTORY="$PIPE_A" timeout 120 "$PY" "$JOB" bench "$BENCH_S" "$barrier" 2 >"$barrier/a.out" 2>>"$LOG" &
            pa=$!
            env CUDA_MPS_PIPE_DIRECTORY="$ROOTPIPE/$B" timeout 120 "$PY" "$JOB" bench "$BENCH_S" "$barrier" 2 >"$barrier/b.out" 2>>"$LOG" &
            pb=$!
            wait "$pa" "$pb"
            ta=$(tail -n 1 "$barrier/a.out" | field tflops 2>>"$LOG" || echo 0)
            tb=$(tail -n 1 "$barrier/b.out" | field tflops 2>>"$LOG" || echo 0)
            say "INFO two allocations at once, 25 % and 50 %, each its own server: $ta + $tb TFLOP/s ($(ratio "$ta" "$ALONE") + $(ratio "$tb" "$ALONE") of alone; the servers time-slice)"
        else
            fail "nvidia-mps started allocation $B's daemon (see $LOG)"
        fi
        # A client that skips MPS (its own CUDA context, time-sliced beside the servers): what it
        # gets, and where NVML lists it and an MPS client (cgpu-monitor could tell them apart).
        env CUDA_MPS_PIPE_DIRECTORY="$PIPE_A" "$PY" "$JOB" alloc 512 20 >"$TMP/in.out" 2>>"$LOG" &
        pin=$! # env runs python in its own process: this is the PID NVML shows
        env CUDA_MPS_PIPE_DIRECTORY="$NO_MPS" "$PY" "$JOB" alloc 512 20 >"$TMP/out.out" 2>>"$LOG" &
        pout=$!
        for _ in $(seq 300); do [[ -s $TMP/in.out && -s $TMP/out.out ]] && break; sleep 0.1; done
        say "INFO NVML's lists, an MPS client $pin and a client outside MPS $pout: $("$PY" "$JOB" nvml "$pin" "$pout" 2>>"$LOG")"
        kill "$pin" "$pout" 2>/dev/null
        wait "$pin" "$pout" 2>/dev/null
        read -r S1 S2 <<<"$(bench_pair "$NO_MPS")"
        say "INFO (for comparison) two clients outside MPS: $S1 + $S2 TFLOP/s"
        barrier=$(mktemp -d "$TMP/barrier.XXXX")
        env CUDA_MPS_PIPE_DIRECTORY="$PIPE_A" timeout 120 "$PY" "$JOB" bench "$BENCH_S" "$barrier" 2 >"$barrier/a.out" 2>>"$LOG" &
        pa=$!
        env CUDA_MPS_PIPE_DIRECTORY="$NO_MPS" timeout 120 "$PY" "$JOB" bench "$BENCH_S" "$barrier" 2 >"$barrier/o.out" 2>>"$LOG" &
        po=$!
        wait "$pa" "$po"
        ta=$(tail -n 1 "$barrier/a.out" | field tflops 2>>"$LOG" || echo 0)
        to=$(tail -n 1 "$barrier/o.out" | field tflops 2>>"$LOG" || echo 0)
        say "INFO allocation at 25 % beside a client that skips MPS: $ta + $to TFLOP/s ($(ratio "$ta" "$ALONE") + $(ratio "$to" "$ALONE") of alone)"
        rm -f "$STATE/mps/$A.json" "$STATE/mps/$B.json"
        for _ in $(seq 300); do [[ -e $PIPE_A ]] || break; sleep 0.1; done
        if [[ ! -e $PIPE_A ]]; then pass "the request removed: nvidia-mps stopped allocation $A's daemon and removed its pipe folder"; else
            fail "allocation $A's pipe folder is still there 30 s after its request went"
        fi
    else
        fail "nvidia-mps started allocation $A's daemon within 60 s (see $LOG)"
    fi
    stop_manager
    left=
    for pid in $(pgrep -f nvidia-cuda-mps); do # its daemons and servers: our pipe folders in their env
        grep -qz "^CUDA_MPS_PIPE_DIRECTORY=$ROOTPIPE/" "/proc/$pid/environ" 2>/dev/null && left="$left $pid"
    done
    if [[ -n $left ]]; then fail "nvidia-mps left MPS processes behind:$left"; else
        pass "nvidia-mps stopped, no MPS daemon or server of its left"
    fi
fi

# --- the GPU as it was ----------------------------------------------------------------------------
MODE_AFTER=$(nvidia-smi -i "$GPU" --query-gpu=compute_mode --format=csv,noheader 2>>"$LOG")
if [[ $MODE_AFTER == "$MODE_BEFORE" ]]; then pass "GPU settings unchanged (compute mode $MODE_AFTER), MPS daemon stopped"; else
    fail "compute mode changed: $MODE_BEFORE -> $MODE_AFTER"
fi
finish
