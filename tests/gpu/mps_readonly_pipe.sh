#!/usr/bin/env bash
# Can an MPS client work with the pipe folder mounted read-only? (issue 12 finding 8)
#   tests/gpu/mps_readonly_pipe.sh [LOG_DIR]
# On a GPU host with the MPS binaries (nvidia-cuda-mps-control on PATH or in /usr/local/nvidia/bin),
# root (for the private mount namespace), python3 with PyTorch or CuPy. For each case it starts a
# fresh MPS control daemon on a temporary pipe folder (log folder log/ inside it, as
# roles/vgpu_stack deploys it), runs one CUDA client that allocates and computes, and asks the
# control daemon whether a server was started for it (the client went through MPS):
#   rw: the client sees the pipe folder read-write (what the device plugin mounts today);
#   ro: the client runs in its own mount namespace where the folder is a read-only bind mount,
#       which is what a container gets with a read-only hostPath mount.
# Prints PASS/FAIL lines and "N passed, N failed" last. Takes under a minute.
set -u
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/mps-readonly.log
: >"$LOG"
PATH=$PATH:/usr/local/nvidia/bin
PY=${PYTHON:-python3}
passed=0
failed=0
pass() { echo "PASS $1" | tee -a "$LOG"; passed=$((passed + 1)); }
fail() { echo "FAIL $1" | tee -a "$LOG"; failed=$((failed + 1)); }

if ! command -v nvidia-cuda-mps-control >/dev/null; then
    fail "mps-binaries (nvidia-cuda-mps-control not found)"
    echo "$passed passed, $failed failed"
    exit 1
fi

# A CUDA client: 256 MiB, a reduction, a short hold so the server is surely up; prints its result.
CLIENT='
import sys
try:
    import torch
    x = torch.ones(64 * 1024 * 1024, device="cuda")
    print("sum", int(x.sum().item()))
except ImportError:
    import cupy
    x = cupy.ones(64 * 1024 * 1024, dtype=cupy.float32)
    print("sum", int(x.sum().get()))
'

# Runs in the client's mount namespace: folder, python, client code.
READONLY_CLIENT=$(mktemp /tmp/vgpu-mps-client.XXXX)
cat >"$READONLY_CLIENT" <<'EOF'
mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 90
touch "$1/probe" 2>/dev/null && exit 91
exec "$2" -c "$3"
EOF
trap 'rm -f "$READONLY_CLIENT"' EXIT

run_case() { # name, readonly (0|1)
    local name=$1 readonly=$2 pipe rc servers
    pipe=$(mktemp -d /tmp/vgpu-mps.XXXX)
    mkdir -p "$pipe/log"
    export CUDA_MPS_PIPE_DIRECTORY=$pipe CUDA_MPS_LOG_DIRECTORY=$pipe/log
    nvidia-cuda-mps-control -d >>"$LOG" 2>&1 || { fail "$name: control daemon did not start"; return; }
    sleep 1
    if [[ $readonly == 1 ]]; then
        # The client's own mount namespace: the folder read-only, as a read-only hostPath mount.
        unshare --mount --propagation private sh "$READONLY_CLIENT" "$pipe" "$PY" "$CLIENT" >>"$LOG" 2>&1
        rc=$?
    else
        "$PY" -c "$CLIENT" >>"$LOG" 2>&1
        rc=$?
    fi
    servers=$(echo get_server_list | nvidia-cuda-mps-control 2>>"$LOG")
    echo "[$name] client rc=$rc, MPS servers: ${servers:-none}" | tee -a "$LOG"
    echo quit | nvidia-cuda-mps-control >>"$LOG" 2>&1
    sleep 1
    rm -rf "$pipe"
    case $rc in
        90) fail "$name: could not make the read-only mount (root needed)" ;;
        91) fail "$name: the pipe folder was still writable" ;;
        0) if [[ -n $servers ]]; then pass "$name: the client ran through MPS"; else fail "$name: no MPS server served the client"; fi ;;
        *) fail "$name: the client failed (rc $rc; see $LOG)" ;;
    esac
}

run_case "pipe folder read-write" 0
run_case "pipe folder read-only" 1
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
