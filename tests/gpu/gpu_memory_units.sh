#!/usr/bin/env bash
# Whole units on a real GPU (issue 25 item 3):  tests/gpu/gpu_memory_units.sh [LOG_DIR]
# nvidia-smi's memory.total (what preflight and the per-node summary read) and NVML's (what the
# device plugin, the extender and the DRA driver count) agree on every GPU, and the collection's
# units rule gives the device plugin's units for units of 100, 256, 512 and 1024 MiB with 0 and
# 512 MiB reserved. Needs nvidia-smi, Python 3 with pynvml (nvidia-ml-py); changes
# nothing. Last line "N passed, N failed"; log in LOG_DIR/gpu-memory-units.log.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
PY=${PYTHON:-python3}
LOG=$LOG_DIR/gpu-memory-units.log
mkdir -p "$LOG_DIR"
"$PY" "$ROOT/tests/gpu/gpu_memory_units.py" >"$LOG" 2>&1
rc=$?
grep -E '^(PASS|FAIL) ' "$LOG"
passed=$(grep -c '^PASS ' "$LOG")
failed=$(grep -c '^FAIL ' "$LOG")
if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then
    tail -5 "$LOG"
    failed=1
fi
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
