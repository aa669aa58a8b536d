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
    export VGPU_CONTEXT_RESERVE=0  # round numbers; the context charge has its own tests
    export VGPU_REGION_DIR=$R VGPU_CONFIG_FILE_DEFAULT_UNUSED=1
    export VGPU_CONFIG_FILE=""
    export VGPU_REAL_LIBCUDA=$FAKE VGPU_REAL_LIBNVML=$B/fake/libnvidia-ml.so.1 FAKE_DRIVER=$FAKE
    export FAKE_GPU_CONF=/dev/null  # one 8 GiB fake GPU, whatever this machine's /etc says
    unset FAKE_GPUS FAKE_TOTAL_MIB FAKE_STATE NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES
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

