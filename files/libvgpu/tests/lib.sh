# Helpers shared by run-tests.sh and run-contract-tests.sh (sourced; $1 = BUILD_DIR, $2 = VARIANT).
set -u
B=$(cd "$1" && pwd)
HERE=$(cd "$(dirname "$0")/.." && pwd)
V=$2
RESULTS=$(dirname "$B")/results.txt
WORK=$(mktemp -d /tmp/vgpu-test.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT
CLIENT=$B/vgpu-test-client
MANAGE=$B/manage
FAKE=$B/fake/libcuda.so.1
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1

# Builtins only: a verdict must be recorded even when an external tool cannot run.
pass() { echo "PASS [$V] $1"; echo "PASS [$V] $1" >>"$RESULTS"; }
fail() {
    echo "FAIL [$V] $1"; echo "FAIL [$V] $1" >>"$RESULTS"
    echo "---- output:"; sed 's/^/    /' "$OUT" | head -40
    echo "---- stderr:"; sed 's/^/    /' "$ERR" | head -40
}

# A fresh container: region folder, no quota file, the fake driver as the real one.
fresh() {
    R=$(mktemp -d "$WORK/region.XXXX")
    OUT=$R/out ERR=$R/err
    unset VGPU_MEMORY_LIMIT LIMIT GPU_VIRTUAL_MEMORY GPU_COMPUTE_AUDIT LD_PRELOAD PRELOAD
    export VGPU_CONTEXT_RESERVE=0 FAKE_CTX_MIB=0  # round numbers; contexts have their own tests
    export VGPU_REGION_DIR=$R VGPU_CONFIG_FILE_DEFAULT_UNUSED=1
    export VGPU_CONFIG_FILE=""
    export VGPU_REAL_LIBCUDA=$FAKE VGPU_REAL_LIBNVML=$B/fake/libnvidia-ml.so.1 FAKE_DRIVER=$FAKE
    export FAKE_GPU_CONF=/dev/null  # one 8 GiB fake GPU, whatever this machine's /etc says
    unset FAKE_GPUS FAKE_TOTAL_MIB FAKE_STATE NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES FAKE_NVML_PROCS \
        FAKE_ALLOC_ROUND_MIB FAKE_POOL_GRANULE_MIB FAKE_RESIDENT_THREADS
    export LD_LIBRARY_PATH=$B
    export VGPU_MEMORY_LIMIT=${1:-100MiB}
}
# run: the client's steps; output in $OUT, stderr in $ERR; sanitizer reports fail the test.
# PRELOAD goes to the client only: exported, it would reach grep and sed too, and an ASan-built
# library preloaded into them crashes them. ASan's runtime must be the first library a process
# loads, so the sanitizer build preloads it ahead of libvgpu.
run() {
    local preload=${PRELOAD:-}
    if [[ -n $preload && $V == *asan* ]]; then preload="$(${CC:-cc} -print-file-name=libasan.so) $preload"; fi
    timeout 60 env ${preload:+LD_PRELOAD="$preload"} "$CLIENT" "$@" >"$OUT" 2>"$ERR"
}
sanitizer_clean() { ! grep -qE 'AddressSanitizer|runtime error:|LeakSanitizer' "$ERR"; }
expect() { # name, grep patterns that must all be in $OUT
    local name=$1; shift
    for p in "$@"; do
        if ! grep -qE -- "$p" "$OUT"; then fail "$name (missing: $p)"; return 1; fi
    done
    if ! sanitizer_clean; then fail "$name (sanitizer report)"; return 1; fi
    pass "$name"
}
wait_for() { for _ in $(seq 100); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
json_field() { "$MANAGE" --stats --json | grep -oE "\"$1\": [0-9]+" | head -1 | awk '{print $2}'; }

# truth_at_most MIB: every "truth used=N" line of $OUT (what the fake GPU holds for the process)
# is at most MIB, and there is at least one.
truth_at_most() {
    local worst
    worst=$(sed -n 's/.*truth used=\([0-9]*\).*/\1/p' "$OUT" | sort -n | tail -1)
    [ -n "$worst" ] && [ "$worst" -le "$1" ]
}
# expect_in_order NAME PATTERNS...: each pattern matches a line of $OUT after the previous one's.
expect_in_order() {
    local name=$1 from=1 at; shift
    for p in "$@"; do
        at=$(tail -n +"$from" "$OUT" | grep -nE -m1 -- "$p" | cut -d: -f1)
        if [ -z "$at" ]; then fail "$name (missing, in order: $p)"; return 1; fi
        from=$((from + at))
    done
    if ! sanitizer_clean; then fail "$name (sanitizer report)"; return 1; fi
    pass "$name"
}
# expect_truth NAME MIB PATTERNS...: expect_in_order, and the GPU never held more than MIB.
expect_truth() {
    local name=$1 limit=$2; shift 2
    if ! truth_at_most "$limit"; then fail "$name (the GPU held $(sed -n 's/.*truth used=\([0-9]*\).*/\1/p' "$OUT" | sort -n | tail -1) MiB, more than $limit)"; return 1; fi
    expect_in_order "$name" "$@"
}
