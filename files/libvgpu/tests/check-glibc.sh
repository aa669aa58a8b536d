#!/bin/sh
# libvgpu is built on the node, with the node's C library, and loaded into containers whose C library
# may be older (a Debian 12 image, glibc 2.36, on an Ubuntu 24.04 node, glibc 2.39). Built with
# glibc 2.38 or later and _GNU_SOURCE, the strtol family, atoi/atol and the scanf family bind to
# __isoc23_* symbols of GLIBC_2.38, which older C libraries lack: the program in the container then
# fails to start. So the sources call none of them (src/vgpu.h has vgpu_decimal), and the shipped
# files need no symbol newer than GLIBC_2.34 (the pthread functions moved into libc there).
# Usage: check-glibc.sh BUILD_DIR   (appends PASS/FAIL lines to build/results.txt)
set -u
dir=$1
here=$(dirname "$0")/..
results=$(dirname "$dir")/results.txt
fail=0
report() { echo "$1 [glibc] $2" | tee -a "$results"; }

# Calls only: lines that are comments (" * ..." or "/* ...") do not count.
calls=$(grep -nE '\b(strto(u?l|u?ll|imax|umax)|ato(i|l|ll)|v?s?f?scanf)[[:space:]]*\(' "$here"/src/*.c "$here"/src/*.h \
    | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/?\*|//)' || true)
if [ -n "$calls" ]; then
    report FAIL "sources call functions that glibc 2.38+ binds to GLIBC_2.38 symbols: $(echo "$calls" | head -5 | tr '\n' ' ')"
    fail=1
else
    report PASS "sources call no strtol, atoi or scanf function (no GLIBC_2.38 binding on newer nodes)"
fi
for f in libcuda.so.1 libnvidia-ml.so.1 libvgpu.so manage vgpu-memory-usage; do
    if [ ! -f "$dir/$f" ]; then
        report FAIL "$dir/$f was not built"
        fail=1
        continue
    fi
    newest=$(objdump -T "$dir/$f" | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -n 1)
    if [ "${newest#GLIBC_2.}" -le 34 ]; then
        report PASS "$f needs no symbol newer than GLIBC_2.34 (newest: $newest)"
    else
        report FAIL "$f needs $newest: containers with an older C library cannot load it"
        fail=1
    fi
done
exit $fail
