#!/usr/bin/env bash
# CUDA graph memory under libvgpu on a real GPU (issue 18):  tests/gpu/graph_memory.sh [LOG_DIR]
# Uses libvgpu installed in VGPU_TEST_PREFIX by tests/gpu/run.sh (builds and installs it there
# itself when missing). Checks, under a 4096 MiB quota: a graph with a 6144 MiB allocation node
# is refused and a 2048 MiB one runs (cuGraphAddMemAllocNode, and from stream capture of
# cuMemAllocAsync); the graph's memory counts for the whole container while it lives; PyTorch
# with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync capturing and replaying a CUDA graph that
# allocates 1.5 x its quota gets an out-of-memory error and 0.5 x runs. Natively the 6144 MiB
# graph runs, so the refusals are libvgpu's. Last line: "N passed, N failed".
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
PREFIX=${VGPU_TEST_PREFIX:-/tmp/vgpu-gpu-prefix}
PY=${PYTHON:-python3}
LOG=$LOG_DIR/graph-memory.log
WORK=$(mktemp -d /tmp/vgpu-graph.XXXX)
mkdir -p "$LOG_DIR"
: >"$LOG"
export PYTHONUNBUFFERED=1
ORIG_LLP=${LD_LIBRARY_PATH:-}
passed=0 failed=0
result() { if [ "$1" = 0 ]; then echo "PASS $2" | tee -a "$LOG"; passed=$((passed + 1)); else echo "FAIL $2" | tee -a "$LOG"; failed=$((failed + 1)); fi; }
wait_for() { for _ in $(seq 300); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# run NAME CMD...: output to $WORK/NAME and the log; the exit status is returned
run() { local name=$1; shift; echo "\$ $*" >>"$LOG"; timeout 120 "$@" >"$WORK/$name" 2>&1; local rc=$?; cat "$WORK/$name" >>"$LOG"; return $rc; }

# A container with a quota of $1 MiB, as the device plugin's quota file says (context charge default).
container() {
    C=$(mktemp -d "$WORK/ctr.XXXX")
    printf 'memory_limit=0:%sMiB\ngpu_virtual_memory=1\nlimit=1\n' "$1" >"$C/quota.conf"
    export VGPU_REGION_DIR=$C VGPU_CONFIG_FILE=$C/quota.conf VGPU_TEST_QUOTA_MIB=$1
    export LD_LIBRARY_PATH=$PREFIX${ORIG_LLP:+:$ORIG_LLP}
    unset LD_PRELOAD VGPU_MEMORY_LIMIT VGPU_CONTEXT_RESERVE PYTORCH_CUDA_ALLOC_CONF
}
native() { unset VGPU_REGION_DIR VGPU_CONFIG_FILE LD_PRELOAD; export LD_LIBRARY_PATH=$ORIG_LLP; }

if [ ! -e "$PREFIX/libcuda.so.1" ] || [ ! -e "$PREFIX/vgpu-memory-usage" ]; then
    make -C "$ROOT/files/libvgpu" OUT=build/gpu all install PREFIX="$PREFIX" >>"$LOG" 2>&1
fi
gcc -O2 -Wall -Wextra -Werror -I"$ROOT/files/libvgpu/src" -o "$WORK/graph_memory" "$ROOT/tests/gpu/graph_memory.c" -ldl \
    >>"$LOG" 2>&1
result $? "graph_memory.c builds with gcc (libvgpu in $PREFIX)"
G=$WORK/graph_memory

# ---------------------------------------------------------------- driver API
( native; run native "$G" 6144 node )
result $? "natively (no libvgpu) the 6144 MiB graph runs: the refusals below are libvgpu's"

for how in node capture; do
    (
        container 4096
        run refused-$how "$G" 6144 $how
        rc=$?
        [ $rc = 2 ] && grep -q "CUDA_ERROR_OUT_OF_MEMORY" "$WORK/refused-$how"
    )
    result $? "quota 4096 MiB: a graph with a 6144 MiB allocation node ($how) is refused with CUDA_ERROR_OUT_OF_MEMORY"
    (
        container 4096
        run runs-$how "$G" 2048 $how && grep -q "graph ($how) of 2048 MiB ran; the whole buffer written, last byte 0x5a" \
            "$WORK/runs-$how"
    )
    result $? "quota 4096 MiB: a 2048 MiB graph ($how) runs, writes its whole buffer"
done

(
    container 4096
    "$G" 2048 node 20 >"$WORK/holder" 2>&1 &
    holder=$!
    wait_for holding "$WORK/holder"
    "$PREFIX/manage" --stats >>"$LOG" 2>&1
    run second "$PREFIX/vgpu-memory-usage" 2048 0
    second=$?
    kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
    cat "$WORK/holder" >>"$LOG"
    run third "$PREFIX/vgpu-memory-usage" 2048 0
    third=$?
    echo "second process while the graph lives: exit $second; after it exited: exit $third" >>"$LOG"
    [ $second = 2 ] && [ $third = 0 ]
)
result $? "a live 2048 MiB graph counts for the container: another process's 2048 MiB is refused, then fits once it is gone"

# ---------------------------------------------------------------- PyTorch, cudaMallocAsync backend
for factor in 1.5 0.5; do
    (
        container 4096
        export PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
        run torch-$factor "$PY" "$ROOT/tests/gpu/graph_memory.py" $factor
        rc=$?
        "$PREFIX/manage" --stats >>"$LOG" 2>&1
        if [ $factor = 1.5 ]; then [ $rc = 2 ]; else [ $rc = 0 ]; fi
    )
    status=$?
    if [ $factor = 1.5 ]; then
        result $status "PyTorch (cudaMallocAsync): capturing a CUDA graph that allocates 1.5 x the 4096 MiB quota gets out-of-memory"
    else
        result $status "PyTorch (cudaMallocAsync): a graph allocating 0.5 x the quota captures and replays; its memory counts while it lives"
    fi
done
sed -n '1,200p' "$WORK"/torch-* 2>/dev/null | sed 's/^/  /'

rm -rf "$WORK"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
