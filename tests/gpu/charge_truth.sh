#!/usr/bin/env bash
# What the GPU really holds under libvgpu (issue 24), on a real GPU host:  bash tests/gpu/charge_truth.sh [LOG_DIR]
# Every path of the issue runs in a "container" (a quota file and a region folder, quota 4096 MiB,
# the default 512 MiB allowance), in both library modes (LD_LIBRARY_PATH shim, LD_PRELOAD
# libvgpu.so), and what the GPU holds for the container's processes is read WITHOUT libvgpu
# (nvidia-smi --query-compute-apps, or NVML from a process that does not load it): it must stay
# within the quota plus the allowance (4608 MiB), and every refusal must be
# CUDA_ERROR_OUT_OF_MEMORY. Launches that grow what the driver reserves (issue 37) and forked
# children that keep a gone parent's memory (issue 38) too. Then the seeded random sequence of the fake driver's suite (240 steps,
# 2 processes, one per library mode) checked against NVML after every step, and PyTorch on
# PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync with cuBLAS and CuPy in one process, which must
# get an out-of-memory error and never go over. Needs gcc, make, nvidia-smi, python3 with torch
# and cupy. Writes LOG_DIR/charge-truth.log (default $OUT, else /tmp/vgpu-gpu-logs); the last line
# is "N passed, N failed". About 4 minutes.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/charge-truth.log
: >"$LOG"
PY=${PYTHON:-python3}
PREFIX=${VGPU_TEST_PREFIX:-/tmp/vgpu-truth-prefix}
BUILD=$ROOT/files/libvgpu/build/truth
QUOTA=4096 ALLOWANCE=512
LIMIT=$((QUOTA + ALLOWANCE))
SEED=${VGPU_TRUTH_SEED:-24}
# VGPU_TRUTH_ONLY=random: the build and the seeded random sequence alone (about a minute).
ONLY=${VGPU_TRUTH_ONLY:-}
ORIG_LLP=${LD_LIBRARY_PATH:-}
WORK=$(mktemp -d /tmp/vgpu-truth.XXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
passed=0 failed=0
say() { echo "$*" | tee -a "$LOG"; }
result() { if [ "$1" = 0 ]; then say "PASS $2"; passed=$((passed + 1)); else say "FAIL $2"; failed=$((failed + 1)); fi; }
wait_for() { for _ in $(seq 600); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# The GPU's own count, past libvgpu: MiB held by the processes given (nvidia-smi, without libvgpu).
gpu_mib() {
    local pids=" $* "
    env -u LD_PRELOAD LD_LIBRARY_PATH="$ORIG_LLP" nvidia-smi --query-compute-apps=pid,used_memory \
        --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | awk -F, -v pids="$pids" \
        'index(pids, " " $1 " ") { s += $2 } END { print s + 0 }'
}

# A fresh container (quota file as the device plugin writes it), in library mode $MODE.
container() {
    C=$(mktemp -d "$WORK/ctr.XXXX")
    printf 'memory_limit=0:%sMiB\ngpu_virtual_memory=1\nlimit=1\n' "$QUOTA" >"$C/quota.conf"
    export VGPU_REGION_DIR=$C VGPU_CONFIG_FILE=$C/quota.conf VGPU_TEST_QUOTA_MIB=$QUOTA
    unset VGPU_MEMORY_LIMIT VGPU_CONTEXT_RESERVE PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD
    if [ "$MODE" = preload ]; then
        export LD_LIBRARY_PATH=$ORIG_LLP LD_PRELOAD=$PREFIX/libvgpu.so
    else
        export LD_LIBRARY_PATH=$PREFIX${ORIG_LLP:+:$ORIG_LLP}
    fi
}

# scenario NAME STEPS...: the test client runs STEPS, then holds; the GPU's count is read while it
# holds. Output in $C/out; $held is what the GPU held for it (MiB).
scenario() {
    local name=$1; shift
    "$CLIENT" "$@" hold:60 >"$C/out" 2>&1 &
    local pid=$!
    if wait_for holding "$C/out"; then held=$(gpu_mib "$pid"); else held=-1; fi
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    { echo "== $MODE $name: the GPU held $held MiB"; cat "$C/out"; } >>"$LOG"
}
# within: the GPU held no more than quota + allowance, and every failed step was out-of-memory
within() { [ "$held" -ge 0 ] && [ "$held" -le "$LIMIT" ] && ! grep -E ' rc=[0-9]+' "$C/out" | grep -qvE 'rc=(0|2)([ ,]|$)'; }

# ---------------------------------------------------------------- build
say "==== build libvgpu (gcc $(gcc -dumpversion)) into $PREFIX; driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
if make -C "$ROOT/files/libvgpu" OUT=build/truth all test-bins >>"$LOG" 2>&1; then
    result 0 "libvgpu builds; every export of this node's driver is classified (gen/check-classes.sh)"
else
    grep -E 'not classified|not a hook' "$LOG" | sed 's/^/  /' | tee -a "$LOG" | head -40
    result 1 "every export of this node's driver is classified (the names above are not: add them to src/hooks.def)"
    say "rebuilding from the committed export lists alone, to run the rest"
    make -C "$ROOT/files/libvgpu" OUT=build/truth REAL_LIBCUDA= REAL_LIBNVML= all test-bins >>"$LOG" 2>&1 \
        || { result 1 "libvgpu build"; echo "$passed passed, $failed failed"; exit 1; }
fi
make -C "$ROOT/files/libvgpu" OUT=build/truth install PREFIX="$PREFIX" >>"$LOG" 2>&1
CLIENT=$BUILD/vgpu-test-client
REAL_CUDA=$(/sbin/ldconfig -p | awk '$1 == "libcuda.so.1" && /x86-64/ { print $NF }' | grep -v '^/opt/vgpu' | head -1)
export FAKE_DRIVER=$REAL_CUDA VGPU_TEST_LINGER_LIB=$BUILD/liblinger.so

if [ "$ONLY" != random ]; then
for MODE in shim preload; do
    say ""
    say "==== library mode: $MODE (quota $QUOTA MiB, allowance $ALLOWANCE MiB: the GPU may hold at most $LIMIT MiB)"

    # 1. a pool that keeps freed memory
    container
    scenario pool init threshold:max alloc:2867:async free:0 sync alloc:2867
    within && grep -q 'alloc 2867 v2 rc=2' "$C/out"
    result $? "$MODE: pool with release threshold UINT64_MAX keeps 2867 MiB freed: cuMemAlloc 2867 refused (GPU $held MiB)"
    container
    scenario pool-trim init threshold:max alloc:2867:async free:0 sync pool-trim:0 alloc:2867
    within && grep -q 'alloc 2867 v2 rc=0' "$C/out"
    result $? "$MODE: after cuMemPoolTrimTo the 2867 MiB fit (GPU $held MiB)"

    # 2. handles released while mapped
    container
    steps=()
    for _ in $(seq 13); do steps+=(vmm:512:release); done
    scenario vmm init "${steps[@]}"
    made=$(grep -c 'vmm 512 release rc=0' "$C/out")
    within && [ "$made" -ge 1 ] && [ "$made" -lt 13 ]
    result $? "$MODE: 13 x 512 MiB handles released while mapped: $made made, the rest refused (GPU $held MiB)"

    # 3. contexts
    container
    scenario contexts init ctxs:16
    within && grep -qE 'ctxs 16 made=[0-9]+ rc=2' "$C/out"
    result $? "$MODE: 16 contexts: $(sed -n 's/.*made=\([0-9]*\).*/\1/p' "$C/out") made, then refused (GPU $held MiB)"

    # 4. modules and libraries with 1 GiB of .global arrays
    container
    scenario modules init module:1024 module:1024 module:1024 module:1024 module:1024 module:1024 module:1024
    n=$(grep -c 'module 1024 data rc=0' "$C/out")
    within && [ "$n" -lt 7 ]
    result $? "$MODE: 7 module loads of 1 GiB globals: $n loaded, the rest refused (GPU $held MiB)"
    container
    scenario libraries init library:1024 library:1024 library:1024:module library:1024 library:1024 library:1024 library:1024
    n=$(grep -c 'use=0' "$C/out")
    within && [ "$n" -lt 7 ]
    result $? "$MODE: 7 library loads of 1 GiB globals (kernel and module lookups): $n loaded (GPU $held MiB)"
    container
    scenario lazy init library:1024:lazy alloc:2000 alloc:1000
    within && grep -q 'library 1024 lazy rc=0 kernel=0 use=0' "$C/out" && grep -q 'alloc 1000 v2 rc=2' "$C/out"
    result $? "$MODE: a library loaded inside cuLaunchKernel: the GPU's own count refuses the allocation that would pass (GPU $held MiB)"

    # 5. the real driver opened by its absolute path
    container
    scenario abs init abs-alloc:6144 abs-alloc:2048
    if [ "$MODE" = preload ]; then
        within && grep -q 'abs-alloc 6144 rc=2' "$C/out"
        result $? "$MODE: the real driver dlopened by its absolute path ($REAL_CUDA): 6144 MiB refused (GPU $held MiB)"
    else
        say "INFO $MODE: the real driver dlopened by its absolute path is not intercepted by the shim alone (GPU $held MiB); the next check runs both modes"
    fi

    # 6. entry points without _v2, the stack limit, what stays uncharged
    container
    scenario v1 init alloc:1024:v1 alloc:1024:v1 alloc:1024:v1 alloc:1024:v1 alloc:1024:array1
    if grep -q 'alloc 1024 v1 rc=0' "$C/out"; then
        within && grep -q 'alloc 1024 v1 rc=2' "$C/out"
        result $? "$MODE: the 32-bit cuMemAlloc is charged like cuMemAlloc_v2 (GPU $held MiB)"
    else
        say "INFO $MODE: this driver does not serve the 32-bit cuMemAlloc: $(grep 'alloc 1024 v1' "$C/out" | head -1)"
    fi
    container
    scenario stack init stack:64 stack:4
    within && grep -qE 'stack 64 rc=2 now=1$' "$C/out"
    result $? "$MODE: cuCtxSetLimit(STACK_SIZE, 64 KiB) (16 GiB here) refused, the old limit kept (GPU $held MiB)"
    container
    scenario host init hostalloc:6144 alloc:2048
    within && grep -q 'hostalloc 6144 rc=0,0' "$C/out" && grep -q 'alloc 2048 v2 rc=0' "$C/out"
    result $? "$MODE: 2 x 6 GiB of pinned host memory are not charged (GPU $held MiB)"
    container
    "$CLIENT" init alloc:1024 ipc-get:0:"$C/ipc" hold:60 >"$C/exporter" 2>&1 &
    exporter=$!
    wait_for holding "$C/exporter"
    scenario ipc init ipc-open:"$C/ipc" alloc:1024 info
    both=$(gpu_mib "$exporter")
    kill "$exporter"; wait "$exporter" 2>/dev/null
    within && grep -q 'ipc-open read=1 rc=0' "$C/out" && grep -q 'alloc 1024 v2 rc=0' "$C/out"
    result $? "$MODE: a second process opening a cuIpcGetMemHandle handle is not charged again (exporter $both MiB)"

    # 7. launches (issue 37): what a launch makes the driver reserve, charged before it (a kernel of
    # 64 KiB local memory a thread: 16632 MiB here; 8 KiB: 1848 MiB, which fits)
    for how in plain ptsz ex coop gpa graph graph-set; do
        container
        scenario "launch-$how" init kernel:0 kernel:8 kernel:64 launch-k:1:$how launch-k:2:$how
        within && grep -q "launch-k 1 $how rc=0" "$C/out" && grep -q "launch-k 2 $how rc=2" "$C/out"
        result $? "$MODE: a kernel of 64 KiB local memory a thread ($how): CUDA_ERROR_OUT_OF_MEMORY at the call; one of 8 KiB runs (GPU $held MiB)"
    done
    container
    scenario launch-lib init kernel:64:lib launch-k:0 kernel:8:lib launch-k:1
    within && grep -q "launch-k 0 plain rc=2" "$C/out" && grep -q "launch-k 1 plain rc=0" "$C/out"
    result $? "$MODE: a library's kernel (CUkernel, as cudart launches): 64 KiB refused, 8 KiB runs (GPU $held MiB)"
    container
    scenario heap init heap:6144 heap:3000 kernel:0:malloc launch-k:0 alloc:1024 alloc:256
    within && grep -q "heap 6144 rc=2" "$C/out" && grep -q "heap 3000 rc=0" "$C/out" \
        && grep -q "launch-k 0 plain rc=0" "$C/out" && grep -q "alloc 1024 v2 rc=2" "$C/out" && grep -q "alloc 256 v2 rc=0" "$C/out"
    result $? "$MODE: a 6144 MiB device heap refused when set; 3000 MiB charged then (with the context 3660 MiB), so 1024 MiB more is refused, 256 fit (GPU $held MiB)"

    # 8. a forked child keeps its parent's memory (issue 38): three rounds of 1000 MiB, each parent gone
    container
    "$CLIENT" init alloc:1000 fork-orphan:60 >"$C/r1" 2>&1
    "$CLIENT" init alloc:1000 fork-orphan:60 >"$C/r2" 2>&1
    scenario fork-orphan init alloc:1000
    orphans=$(sed -n 's/fork-orphan child=//p' "$C/r1" "$C/r2")
    all=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | tr -d ' ' \
        | awk -F, '{ s += $2 } END { print s + 0 }')
    for orphan in $orphans; do kill "$orphan" 2>/dev/null; done
    cat "$C/r1" "$C/r2" >>"$LOG"
    grep -q "alloc 1000 v2 rc=0" "$C/r1" && grep -q "alloc 1000 v2 rc=0" "$C/r2" && grep -q "alloc 1000 v2 rc=2" "$C/out"
    result $? "$MODE: a parent gone while its forked child holds its memory: the third 1000 MiB refused (the whole GPU held $all MiB for all processes)"
done

# ---------------------------------------------------------------- both modes at once
say ""
say "==== both library modes in one process"
MODE=shim
container
export LD_PRELOAD=$PREFIX/libvgpu.so
scenario both init abs-alloc:2048 alloc:1024 info abs-alloc:2048
unset LD_PRELOAD
within && grep -q 'abs-alloc 2048 rc=0' "$C/out" && grep -q 'abs-alloc 2048 rc=2' "$C/out" && ! grep -q restored "$C/out"
result $? "shim and LD_PRELOAD at once: the real driver by absolute path is intercepted, one accounting (GPU $held MiB)"

fi
# ---------------------------------------------------------------- the seeded random sequence
say ""
say "==== seeded random sequence (seed $SEED, 240 steps, 2 processes: shim and LD_PRELOAD)"
MODE=shim
container
# TRUTH_VERBOSE: every step's call and result in the log, and what the GPU held for each worker
# after it, so that a violation names its call; at the first violation the checker runs
# TRUTH_STATS: libvgpu's own count in the region, read from outside (manage --stats --no-sweep).
export TRUTH_STATS="$PREFIX/manage --stats --no-sweep --region $C/vgpu.region"
TRUTH_VERBOSE=1 timeout 240 "$BUILD/truth-random" worker 0 "$SEED" 240 "$C/turns" 1024 >"$C/w0" 2>&1 &
w0=$!
TRUTH_VERBOSE=1 LD_LIBRARY_PATH=$ORIG_LLP LD_PRELOAD=$PREFIX/libvgpu.so timeout 240 "$BUILD/truth-random" worker 1 "$SEED" 240 \
    "$C/turns" 1024 >"$C/w1" 2>&1 &
w1=$!
TRUTH_VERBOSE=1 env -u LD_PRELOAD LD_LIBRARY_PATH="$ORIG_LLP" timeout 240 "$BUILD/truth-random" checker 240 "$C/turns" "$LIMIT" >"$C/c" 2>&1
c=$?
wait $w0; a=$?
wait $w1; b=$?
cat "$C/c" "$C/w0" "$C/w1" >>"$LOG"
first=$(sed -n 's/^step \([0-9]*\): the GPU holds.*/\1/p' "$C/c" | head -n 1)
if [ -n "$first" ]; then  # the calls up to the first step the GPU held too much after
    say "the calls before the first violation (step $first):"
    grep -h '^step ' "$C/w0" "$C/w1" | sort -t' ' -k2,2n | awk -v f="$first" '{ n = $2 + 0 } n > f - 8 && n <= f' | tee -a "$LOG"
fi
[ $a = 0 ] && [ $b = 0 ] && [ $c = 0 ] && grep -q 'violations=0' "$C/c"
result $? "random sequence: $(grep '^random checked' "$C/c"); workers: $(grep -h '^random worker' "$C/w0" "$C/w1" | sed 's/.*ok=/ok=/' | tr '\n' ' ')"

if [ "$ONLY" != random ]; then
# ---------------------------------------------------------------- PyTorch cudaMallocAsync + cuBLAS + CuPy
for MODE in shim preload; do
    container
    export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
    timeout 240 "$PY" "$ROOT/tests/gpu/charge_truth.py" >"$C/py" 2>&1 &
    pid=$!
    peak=0
    while kill -0 "$pid" 2>/dev/null; do
        now=$(gpu_mib "$pid" $(pgrep -P "$pid")) # $pid is timeout's: its child is Python
        [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.2
    done
    wait "$pid"; rc=$?
    cat "$C/py" >>"$LOG"
    [ $rc = 2 ] && [ "$peak" -le "$LIMIT" ]
    result $? "$MODE: PyTorch (cudaMallocAsync) + cuBLAS + CuPy: $(grep -m1 -oE '(torch|cupy) OutOfMemoryError' "$C/py" || echo 'no OOM'), the GPU never above $LIMIT MiB (peak sampled $peak MiB)"
done
fi

echo "$passed passed, $failed failed" | tee -a "$LOG"
[ "$failed" = 0 ]
