#!/usr/bin/env bash
# libvgpu on a real GPU host, one command:  tests/gpu/run.sh [LOG_DIR]
# Builds and installs libvgpu (gcc + make), then runs every GPU test inside "containers" made of
# the container contract's environment (LD_LIBRARY_PATH=<prefix>, a region folder, a quota file):
# the reference scenario with nvidia-smi, the driver-API allocation paths, PyTorch (default,
# expandable_segments, cudaMallocAsync, LD_PRELOAD), CuPy, JAX, pynvml, processes sharing one
# quota, kill -9 reclaim, fail-closed configuration, launch audit.
# Writes LOG_DIR/gpu-tests.log (everything) and LOG_DIR/gpu-results.txt (PASS/FAIL lines); the
# last line of output is "N passed, N failed". Default LOG_DIR: $OUT, else /tmp/vgpu-gpu-logs.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/gpu-tests.log
RESULTS=$LOG_DIR/gpu-results.txt
: >"$LOG"
: >"$RESULTS"
PY=${PYTHON:-python3}
PREFIX=${VGPU_TEST_PREFIX:-/tmp/vgpu-gpu-prefix}
BUILD=$ROOT/files/libvgpu/build/gpu
FW=$ROOT/tests/gpu/frameworks.py
ORIG_LLP=${LD_LIBRARY_PATH:-}
SHIM_LLP=$PREFIX${ORIG_LLP:+:$ORIG_LLP}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0

say() { echo "$*" | tee -a "$LOG"; }
section() { say ""; say "==== $*"; }
pass() { echo "PASS $1" | tee -a "$RESULTS" "$LOG"; }
fail() { echo "FAIL $1" | tee -a "$RESULTS" "$LOG"; }
check() { # name, command...: PASS when the command succeeds
    local name=$1; shift
    if "$@" >>"$LOG" 2>&1; then pass "$name"; else fail "$name"; fi
}
logrun() { echo "\$ $*" >>"$LOG"; "$@" >>"$LOG" 2>&1; }
wait_for() { for _ in $(seq 300); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

# A fresh container with a quota of $1 MiB (quota file as the device plugin writes it).
container() {
    C=$(mktemp -d /tmp/vgpu-ctr.XXXX)
    printf 'memory_limit=0:%sMiB\ngpu_virtual_memory=1\nlimit=1\ngpu_cgroup_enable=0\ncgroup_map_mode=0\ngpu_compute_audit=%s\n' \
        "$1" "${AUDIT:-0}" >"$C/quota.conf"
    export VGPU_REGION_DIR=$C VGPU_CONFIG_FILE=$C/quota.conf VGPU_TEST_QUOTA_MIB=$1
    export LD_LIBRARY_PATH=$SHIM_LLP
    unset LD_PRELOAD VGPU_MEMORY_LIMIT PYTORCH_CUDA_ALLOC_CONF
}
native() { unset VGPU_REGION_DIR VGPU_CONFIG_FILE VGPU_MEMORY_LIMIT LD_PRELOAD; export LD_LIBRARY_PATH=$ORIG_LLP; }
smi_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }

# ---------------------------------------------------------------- build and install
section "build (gcc $(gcc -dumpversion), make)"
if make -C "$ROOT/files/libvgpu" OUT=build/gpu all test-bins >>"$LOG" 2>&1 \
    && make -C "$ROOT/files/libvgpu" OUT=build/gpu install PREFIX="$PREFIX" >>"$LOG" 2>&1; then
    pass "libvgpu builds with gcc and make and installs into $PREFIX"
else
    fail "build"; echo "0 passed, 1 failed"; exit 1
fi
CLIENT=$BUILD/vgpu-test-client
say "exports: libcuda.so.1 $(nm -D --defined-only "$PREFIX/libcuda.so.1" | grep -c ' T cu') cu* functions," \
    "libnvidia-ml.so.1 $(nm -D --defined-only "$PREFIX/libnvidia-ml.so.1" | grep -c ' T nvml') nvml* functions"
logrun nvidia-smi
logrun nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
( container 1000; VGPU_LOG_LEVEL=2 "$CLIENT" init 2>&1 | grep -E 'real|init' | tee -a "$LOG" )

# ---------------------------------------------------------------- the reference scenario
section "reference scenario: quota 3000 MiB, a 1200 MiB app, nvidia-smi inside"
(
    container 3000
    app=$C/app.out
    "$PREFIX/vgpu-memory-usage" 1200 40 >"$app" 2>&1 &
    pid=$!
    wait_for holding "$app"
    cat "$app" >>"$LOG"
    nvidia-smi >"$C/smi.txt" 2>&1
    cat "$C/smi.txt" >>"$LOG"
    q=$(nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader | head -1)
    say "nvidia-smi --query-gpu=memory.used,memory.total: $q"
    if grep -qE '1200MiB +/ +3000MiB' "$C/smi.txt" && [ "$q" = "1200 MiB, 3000 MiB" ]; then
        pass "quota 3000 MiB: the 1200 MiB app runs and nvidia-smi inside shows 1200MiB / 3000MiB"
    else fail "reference: nvidia-smi shows $q"; fi
    export VGPU_TEST_USED_MIB=1200
    check "pynvml v1 and v2 report total = quota, used = the container's 1200 MiB" timeout 60 "$PY" "$FW" pynvml
    say "manage --stats --json:"; "$PREFIX/manage" --stats --json | tee -a "$LOG"
    "$PREFIX/manage" --stats >>"$LOG" 2>&1
    kill "$pid"; wait "$pid" 2>/dev/null
)
(
    container 1000
    timeout 60 "$PREFIX/vgpu-memory-usage" 1200 0 >"$C/app.out" 2>&1; rc=$?
    cat "$C/app.out" >>"$LOG"
    if [ $rc = 2 ] && grep -q CUDA_ERROR_OUT_OF_MEMORY "$C/app.out"; then
        pass "quota 1000 MiB: the same app fails with CUDA_ERROR_OUT_OF_MEMORY"
    else fail "quota 1000 MiB: app exit $rc"; fi
)

# ---------------------------------------------------------------- what a context really costs
section "native context footprint (for VGPU_CONTEXT_RESERVE)"
(
    native
    base=$(smi_used)
    out=$(mktemp)
    "$PREFIX/vgpu-memory-usage" 1200 15 >"$out" 2>&1 &
    pid=$!
    wait_for holding "$out"
    used=$(smi_used)
    kill "$pid"; wait "$pid" 2>/dev/null
    say "driver-API process holding 1200 MiB: nvidia-smi used $base -> $used MiB: context ~ $((used - base - 1200)) MiB"
    timeout 120 "$PY" -c "
import subprocess, torch
x = torch.empty(1200 << 20, dtype=torch.uint8, device='cuda'); x.fill_(1); torch.cuda.synchronize()
u = subprocess.run(['nvidia-smi', '--query-gpu=memory.used', '--format=csv,noheader,nounits'], capture_output=True, text=True).stdout.split()[0]
print(f'PyTorch process holding 1200 MiB: nvidia-smi used $base -> {u} MiB: context ~ {int(u) - $base - 1200} MiB')
" 2>&1 | tail -1 | tee -a "$LOG"
)

# ---------------------------------------------------------------- driver API paths
section "driver API allocation paths (quota 1600 MiB; the context is charged what NVML measures, ~518 MiB)"
# info lines are "info rc=0 free=N total=1600"; the Nth one's free MiB:
info_free() { grep '^info rc=0' "$1" | sed -n "${2}p" | sed 's/.*free=\([0-9]*\).*/\1/'; }
for api in v2 managed async async_ptsz pool pool_ptsz create array array3d mipmap gpa gpa2 gpa2_ptsz; do
    (
        container 1600
        timeout 60 "$CLIENT" init alloc:600:$api alloc:600:$api info free:0 info alloc:800:$api info >"$C/out" 2>&1
        cat "$C/out" >>"$LOG"
        before=$(info_free "$C/out" 1) after=$(info_free "$C/out" 2)
        # Stream-ordered pools keep what was freed until a synchronize (the charge follows the
        # pool's reserve); every other path gives the 600 MiB back at its free.
        case $api in async* | pool* | gpa*) released=$((after >= before)) ;; *) released=$((after == before + 600)) ;; esac
        if grep -q "alloc 600 $api rc=0" "$C/out" && grep -q "alloc 600 $api rc=2$" "$C/out" \
            && grep -q "free 0 rc=0" "$C/out" && [ "$released" = 1 ] && grep -q "alloc 800 $api rc=0" "$C/out" \
            && grep -q "total=1600" "$C/out"; then
            pass "driver API $api: counted, refused with CUDA_ERROR_OUT_OF_MEMORY past the quota, released by its free (free $before -> $after MiB)"
        else fail "driver API $api (free $before -> $after MiB)"; fi
    )
done
(
    container 4096
    timeout 60 "$CLIENT" init alloc:6144:array3d alloc:6144:pool alloc:6144:create alloc:6144:async alloc:6144:managed \
        alloc:6144:mipmap info >"$C/out" 2>&1
    cat "$C/out" >>"$LOG"
    if [ "$(grep -c 'rc=2$' "$C/out")" = 6 ] && grep -q "info rc=0 free=[0-9]* total=4096" "$C/out"; then
        pass "6 GiB cuArray3DCreate, FromPoolAsync, cuMemCreate, AllocAsync, managed, mipmapped refused under 4 GiB"
    else fail "6 GiB requests"; fi
    timeout 60 "$CLIENT" init forward infonull totalmem ctx >"$C/out2" 2>&1
    cat "$C/out2" >>"$LOG"
    if grep -q "forward name=NVIDIA" "$C/out2" && grep -q "totalmem rc=0 total=4096" "$C/out2" \
        && grep -qE "infonull rc=[0-9]+ total=" "$C/out2"; then
        pass "forwarded calls reach the driver; cuDeviceTotalMem reports the quota; NULL outputs do not crash"
    else fail "forwarding / totalmem / NULL outputs"; fi
)

# ---------------------------------------------------------------- PyTorch
section "how cuGetProcAddress answers reach the hooks (PyTorch, debug log)"
(
    container 2000
    VGPU_LOG_LEVEL=3 timeout 120 "$PY" -c "import torch; x = torch.ones(1 << 20, device='cuda'); print(float(x.sum()))" \
        >"$C/dbg" 2>&1
    say "hooked by identity: $(grep -c 'hook by identity' "$C/dbg"), by name: $(grep -c 'hook by name' "$C/dbg")"
    grep 'hook by' "$C/dbg" | sort | uniq -c | sort -rn | head -40 >>"$LOG"
)
section "PyTorch (quota 2000 MiB)"
for conf in "" "expandable_segments:True" "backend:cudaMallocAsync"; do
    (
        container 2000
        [ -n "$conf" ] && export PYTORCH_CUDA_ALLOC_CONF=$conf
        check "PyTorch ${conf:-default allocator}: mem_get_info total = quota, torch.OutOfMemoryError past it" \
            timeout 180 "$PY" "$FW" torch
        "$PREFIX/manage" --stats >>"$LOG" 2>&1
    )
done
(
    container 2000
    LD_LIBRARY_PATH=$ORIG_LLP LD_PRELOAD=$PREFIX/libvgpu.so \
        check "PyTorch with LD_PRELOAD=libvgpu.so (no shim on the path): quota enforced" timeout 180 "$PY" "$FW" torch
)

# ---------------------------------------------------------------- CuPy, JAX
section "CuPy and JAX"
( container 2000; check "CuPy: memGetInfo total = quota, OutOfMemoryError past it" timeout 180 "$PY" "$FW" cupy )
(
    container 4000
    check "JAX: preallocation sized from the quota, RESOURCE_EXHAUSTED past it" timeout 240 "$PY" "$FW" jax
    "$PREFIX/manage" --stats >>"$LOG" 2>&1
)

# ---------------------------------------------------------------- processes sharing one quota, crashes
section "processes sharing one quota, kill -9 (quota 3000 MiB, 512 MiB per context)"
(
    container 3000
    "$PREFIX/vgpu-memory-usage" 1200 30 >"$C/a" 2>&1 &
    pid=$!
    wait_for holding "$C/a"
    timeout 60 "$PREFIX/vgpu-memory-usage" 1200 0 >"$C/b" 2>&1; b=$?
    timeout 60 "$PREFIX/vgpu-memory-usage" 700 0 >"$C/c" 2>&1; c=$?
    cat "$C/a" "$C/b" "$C/c" >>"$LOG"
    if [ $b = 2 ] && [ $c = 0 ]; then pass "two processes share one quota: 1200 + 1200 refused, 1200 + 700 fits (with contexts)"
    else fail "shared quota b=$b c=$c"; fi
    kill -9 "$pid"; wait "$pid" 2>/dev/null
    timeout 60 "$PREFIX/vgpu-memory-usage" 1800 0 >"$C/d" 2>&1; d=$?
    cat "$C/d" >>"$LOG"
    "$PREFIX/manage" --stats >>"$LOG" 2>&1
    if [ $d = 0 ]; then pass "memory of a process killed with -9 is reclaimed"; else fail "kill -9 reclaim d=$d"; fi
)

# ---------------------------------------------------------------- configuration
section "fail-closed configuration"
(
    native
    dir=$(mktemp -d)
    export VGPU_MEMORY_LIMIT=3000MB VGPU_REGION_DIR=$dir
    LD_LIBRARY_PATH=$SHIM_LLP timeout 120 "$PY" -c "import torch; torch.zeros(1, device='cuda')" >"$dir/out" 2>&1
    rc=$?
    tail -5 "$dir/out" >>"$LOG"
    if [ $rc != 0 ] && grep -q '3000MB' "$dir/out"; then
        pass "VGPU_MEMORY_LIMIT=3000MB: CUDA init fails and stderr names the bad value"
    else fail "bad configuration rc=$rc"; fi
    LD_LIBRARY_PATH=$SHIM_LLP nvidia-smi >"$dir/smi" 2>&1
    rc=$?
    head -3 "$dir/smi" >>"$LOG"
    if [ $rc != 0 ] && grep -q '3000MB' "$dir/smi"; then pass "nvidia-smi fails closed too"
    else fail "nvidia-smi with bad configuration rc=$rc"; fi
)

section "GPU_COMPUTE_AUDIT=1"
(
    AUDIT=1 container 2000
    timeout 120 "$PY" -c "
import time, torch
x = torch.zeros(1024, device='cuda')
for _ in range(100):
    x.add_(1.0)
torch.cuda.synchronize()
print('holding', flush=True)
time.sleep(8)
" >"$C/out" 2>&1 &
    pid=$!
    wait_for holding "$C/out"
    launches=$("$PREFIX/manage" --stats --json | grep -oE '"launches": [0-9]+' | head -1 | awk '{print $2}')
    wait "$pid"
    say "launches recorded: $launches"
    if [ "${launches:-0}" -ge 100 ]; then pass "GPU_COMPUTE_AUDIT=1 records the process's kernel launches"
    else fail "audit launches=$launches"; fi
)

pass_n=$(grep -c '^PASS' "$RESULTS")
fail_n=$(grep -c '^FAIL' "$RESULTS")
say ""
say "$pass_n passed, $fail_n failed"
[ "$fail_n" = 0 ]
