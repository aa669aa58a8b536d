#!/bin/sh
# The shipped (release) libraries export what they must: every name of the committed export lists
# and every hook, as functions; nothing of ours but the marker (and dlsym in libvgpu.so).
# Usage: check-exports.sh BUILD_DIR   (appends PASS/FAIL lines to build/results.txt)
set -u
dir=$1
results=$(dirname "$dir")/results.txt
fail=0
report() { echo "$1 [exports] $2" | tee -a "$results"; }
names() { sed -e 's/#.*//' -e 's/[[:space:]]//g' "$@" | grep -v '^$' | sort -u; }
exported() { nm -D --defined-only "$1" | awk '$2 == "T" { print $3 }' | sort -u; }

check_lib() { # lib, lists...
    lib=$1; shift
    missing=$(names "$@" | comm -23 - "$(exported_file "$lib")")
    if [ -n "$missing" ]; then
        report FAIL "$(basename "$lib") lacks $(echo "$missing" | head -5 | tr '\n' ' ')"; fail=1
    else
        report PASS "$(basename "$lib") exports all $(names "$@" | wc -l) listed functions"
    fi
    extra=$(nm -D --defined-only "$lib" | awk '{ print $3 }' | grep -Ev '^(cu|nvml)[A-Za-z0-9_]+$|^vgpu_shim_marker$|^vgpu_preload_marker$|^dlsym$' || true)
    if [ -n "$extra" ]; then
        report FAIL "$(basename "$lib") leaks internal symbols: $(echo "$extra" | head -5 | tr '\n' ' ')"; fail=1
    else
        report PASS "$(basename "$lib") exports no internal symbols"
    fi
}
exported_file() { exported "$1" >"$dir/.exports"; echo "$dir/.exports"; }

here=$(dirname "$0")/..
# the hooked names as generated from src/hooks.def
check_lib "$dir/libcuda.so.1" "$here"/exports/libcuda-*.txt "$dir/gen/hooks-cuda.txt"
check_lib "$dir/libnvidia-ml.so.1" "$here"/exports/libnvidia-ml-*.txt "$dir/gen/hooks-nvml.txt"
check_lib "$dir/libvgpu.so" "$here"/exports/libcuda-*.txt "$dir/gen/hooks-cuda.txt" "$here"/exports/libnvidia-ml-*.txt "$dir/gen/hooks-nvml.txt"
if nm -D --defined-only "$dir/libvgpu.so" | grep -q ' T dlsym$'; then
    report PASS "libvgpu.so exports dlsym"
else
    report FAIL "libvgpu.so does not export dlsym"; fail=1
fi
if nm -D --defined-only "$dir/libcuda.so.1" | grep -q ' dlsym$'; then
    report FAIL "libcuda.so.1 must not override dlsym"; fail=1
else
    report PASS "libcuda.so.1 leaves dlsym alone"
fi
for lib in libcuda.so.1 libnvidia-ml.so.1; do
    soname=$(readelf -d "$dir/$lib" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
    if [ "$soname" = "$lib" ]; then report PASS "$lib has SONAME $lib"; else report FAIL "$lib SONAME is '$soname'"; fail=1; fi
done
rm -f "$dir/.exports"
exit $fail
