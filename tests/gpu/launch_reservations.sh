#!/usr/bin/env bash
# What a kernel launch makes the driver reserve, measured natively on a GPU host (issue 37):
#   bash tests/gpu/launch_reservations.sh [LOG_DIR]
# Builds tests/gpu/launch_reservations.c with gcc and runs each scenario in a fresh process
# without libvgpu; every line is what NVML says the process holds after a step and the step's
# delta. Writes LOG_DIR/launch-reservations.log (default $OUT, else /tmp/vgpu-gpu-logs).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/launch-reservations.log
BIN=$(mktemp -d)/launch-reservations
gcc -O2 -Wall -Wextra -Werror -o "$BIN" "$ROOT/tests/gpu/launch_reservations.c" -ldl || exit 1
run() { echo "== $*"; env -u LD_PRELOAD timeout 120 "$BIN" "$@" 2>&1; echo "exit=$?"; }
{
    echo "driver $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
    run info
    for how in plain ptsz ex coop gpa graph; do run local 64 132 256 "$how"; done
    run local 64 1 1 plain
    run local 8 132 256 plain
    run local 200 132 256 plain
    run preset 64
    run sweep
    run grow
    run heap 0
    run heap 6144
    run printf 0
    run printf 2048
    run pending 2048
    run pending 1000000
    run syncdepth 24
    devrt=$(find / -xdev -name libcudadevrt.a 2>/dev/null | head -1)
    if [ -n "$devrt" ]; then
        run cdp 2048 "$devrt"
        run cdp 100000 "$devrt"
    else
        echo "== cdp: no libcudadevrt.a on this host"
    fi
    CUDA_MODULE_LOADING=EAGER run local 64 132 256 plain
    run kernel-attr
    run fork-exec 1000 >"$LOG_DIR/fork-exec.out"
    cat "$LOG_DIR/fork-exec.out"
    parent=$(sed -n 's/fork-exec parent=\([0-9]*\).*/\1/p' "$LOG_DIR/fork-exec.out")
    sleep 1
    echo "after fork+exec, the exited parent $parent holds: $(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader | grep "^$parent," || echo nothing)"
} 2>&1 | tee "$LOG"
