#!/usr/bin/env bash
# A real framework at its quota (issue 37), on a GPU host:  bash tests/gpu/frameworks_at_quota.sh PREFIX [LOG_DIR]
# PyTorch (its default caching allocator and cudaMallocAsync), CuPy and JAX each fill 75 % of a
# 4096 MiB quota (the context included: 2304 MiB of matrices) and compute with their own kernels
# and cuBLAS/cuDNN (frameworks_at_quota.py), once natively and once under libvgpu (PREFIX: the
# installed shim, LD_LIBRARY_PATH mode). Each must finish with the same results as the native run
# (relative difference below 1e-5), and the GPU's own count of the process (nvidia-smi, read
# without libvgpu, sampled every 0.2 s) must stay within the quota plus the 512 MiB allowance.
# PyTorch's first run under libvgpu also logs which launch handles the runtime uses (VGPU_LOG_LEVEL=3).
# Writes LOG_DIR/frameworks-at-quota.log; the last line is "N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PREFIX=$1
LOG_DIR=${2:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/frameworks-at-quota.log
: >"$LOG"
PY=${PYTHON:-python3}
QUOTA=4096 FILL=2304 LIMIT=4608
ORIG_LLP=${LD_LIBRARY_PATH:-}
WORK=$(mktemp -d /tmp/vgpu-fw.XXXX)
trap 'rm -rf "$WORK"' EXIT
export PYTHONUNBUFFERED=1
passed=0 failed=0
say() { echo "$*" | tee -a "$LOG"; }
result() { if [ "$1" = 0 ]; then say "PASS $2"; passed=$((passed + 1)); else say "FAIL $2"; failed=$((failed + 1)); fi; }

gpu_mib() { # MiB the GPU holds for the pids given, read without libvgpu
    local pids=" $* "
    env -u LD_PRELOAD LD_LIBRARY_PATH="$ORIG_LLP" nvidia-smi --query-compute-apps=pid,used_memory \
        --format=csv,noheader,nounits 2>/dev/null | tr -d ' ' | awk -F, -v pids="$pids" \
        'index(pids, " " $1 " ") { s += $2 } END { print s + 0 }'
}

# run NAME FRAMEWORK: the workload in $WORK/NAME.out, its peak (MiB) in $peak
run() {
    local name=$1 fw=$2
    shift 2 # the rest: env(1) arguments for this run only
    timeout 300 env "$@" "$PY" "$ROOT/tests/gpu/frameworks_at_quota.py" "$fw" "$FILL" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local pid=$!
    peak=0
    while kill -0 "$pid" 2>/dev/null; do
        local now
        now=$(gpu_mib "$pid" $(pgrep -P "$pid"))
        [ "$now" -gt "$peak" ] && peak=$now
        sleep 0.2
    done
    wait "$pid"
    { echo "== $name (peak $peak MiB)"; cat "$WORK/$name.out"; tail -5 "$WORK/$name.err"; } >>"$LOG"
}

same() { # the result lines of two runs agree to 1e-5 relative
    "$PY" - "$WORK/$1.out" "$WORK/$2.out" <<'EOF'
import sys
def sums(path):
    for line in open(path):
        if line.startswith("result="):
            return [float(v) for v in line.strip()[7:].split(",")]
    sys.exit(f"no result in {path}")
a, b = sums(sys.argv[1]), sums(sys.argv[2])
ok = len(a) == len(b) and all(abs(x - y) <= 1e-5 * max(1.0, abs(x)) for x, y in zip(a, b))
print("native", a, "libvgpu", b)
sys.exit(0 if ok else 1)
EOF
}

for case in torch:default torch:cudaMallocAsync cupy:default jax:default; do
    fw=${case%%:*} alloc=${case#*:}
    unset PYTORCH_CUDA_ALLOC_CONF VGPU_LOG_LEVEL
    [ "$alloc" = cudaMallocAsync ] && export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
    # natively: no libvgpu, no preallocation of most of the GPU by JAX
    run "$fw-$alloc-native" "$fw" -u VGPU_REGION_DIR -u VGPU_CONFIG_FILE \
        LD_LIBRARY_PATH="$ORIG_LLP" XLA_PYTHON_CLIENT_PREALLOCATE=false
    C=$(mktemp -d "$WORK/ctr.XXXX")
    printf 'memory_limit=0:%sMiB\ngpu_virtual_memory=1\nlimit=1\n' "$QUOTA" >"$C/quota.conf"
    export VGPU_REGION_DIR=$C VGPU_CONFIG_FILE=$C/quota.conf LD_LIBRARY_PATH=$PREFIX${ORIG_LLP:+:$ORIG_LLP}
    [ "$case" = torch:default ] && export VGPU_LOG_LEVEL=3
    run "$fw-$alloc-vgpu" "$fw"
    unset VGPU_REGION_DIR VGPU_CONFIG_FILE VGPU_LOG_LEVEL
    export LD_LIBRARY_PATH=$ORIG_LLP
    if [ "$case" = torch:default ]; then
        say "INFO PyTorch's first launches under libvgpu: $(grep -c 'first launch of .*: a function' "$WORK/$fw-$alloc-vgpu.err") module functions," \
            "$(grep -c "first launch of .*: a library's kernel" "$WORK/$fw-$alloc-vgpu.err") library kernels," \
            "$(grep -c 'first launch of .*: a handle the driver' "$WORK/$fw-$alloc-vgpu.err") handles the driver tells no local size of"
    fi
    same "$fw-$alloc-native" "$fw-$alloc-vgpu" >>"$LOG" 2>&1 && grep -q holding "$WORK/$fw-$alloc-vgpu.out" && [ "$peak" -le "$LIMIT" ]
    result $? "$fw ($alloc) fills 75 % of a $QUOTA MiB quota and computes the same results as natively; the GPU held at most $peak MiB for it (limit $LIMIT)"
done
echo "$passed passed, $failed failed" | tee -a "$LOG"
[ "$failed" = 0 ]
