#!/usr/bin/env bash
# libvgpu on a host with two or more GPUs:  tests/gpu/multi_gpu.sh [LOG_DIR]
# Run after tests/gpu/run.sh (it builds and installs libvgpu into VGPU_TEST_PREFIX). Checks
# per-device quotas and a container placed on one GPU of two; last line "N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
PREFIX=${VGPU_TEST_PREFIX:-/tmp/vgpu-gpu-prefix}
PY=${PYTHON:-python3}
LOG=$LOG_DIR/multi-gpu.log
mkdir -p "$LOG_DIR"
: >"$LOG"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
passed=0 failed=0
result() { if [ "$1" = 0 ]; then echo "PASS $2" | tee -a "$LOG"; passed=$((passed + 1)); else echo "FAIL $2" | tee -a "$LOG"; failed=$((failed + 1)); fi; }

gpus=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | wc -l)
if [ "$gpus" -lt 2 ]; then
    echo "this host has $gpus GPU(s); the multi-GPU checks need two" | tee -a "$LOG"
    echo "0 passed, 1 failed"
    exit 1
fi
second=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | sed -n 2p | tr -d ' ')

quota_dir() { # $1 = memory_limit value
    local dir
    dir=$(mktemp -d /tmp/vgpu-multi.XXXX)
    printf 'memory_limit=%s\ngpu_virtual_memory=1\nlimit=1\n' "$1" >"$dir/quota.conf"
    echo "$dir"
}

# Per-device quotas: both GPUs visible, each with its own quota.
dir=$(quota_dir "0:3000MiB,1:2000MiB")
env LD_LIBRARY_PATH="$PREFIX" VGPU_REGION_DIR="$dir" VGPU_CONFIG_FILE="$dir/quota.conf" \
    timeout 180 "$PY" "$ROOT/tests/gpu/multi_gpu.py" per-device >>"$LOG" 2>&1
result $? "per-device quotas 0:3000MiB,1:2000MiB: each GPU reports and enforces its own quota"
smi=$(env LD_LIBRARY_PATH="$PREFIX" VGPU_REGION_DIR="$dir" VGPU_CONFIG_FILE="$dir/quota.conf" \
    nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader 2>&1 | head -2)
echo "nvidia-smi with per-device quotas: $smi" | tee -a "$LOG"
echo "$smi" | grep -q "^0, .* 3000 MiB" && echo "$smi" | grep -q "^1, .* 2000 MiB"
result $? "nvidia-smi shows 3000 MiB for GPU 0 and 2000 MiB for GPU 1"

# A container placed on the second GPU of two, as the device plugin's env does it.
dir=$(quota_dir "0:3000MiB")
env LD_LIBRARY_PATH="$PREFIX" VGPU_REGION_DIR="$dir" VGPU_CONFIG_FILE="$dir/quota.conf" \
    CUDA_VISIBLE_DEVICES="$second" VGPU_TEST_PLACED_UUID="$second" \
    timeout 180 "$PY" "$ROOT/tests/gpu/multi_gpu.py" placed >>"$LOG" 2>&1
result $? "a container placed on GPU 1 of 2 sees only that GPU, with its 3000 MiB quota enforced"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
