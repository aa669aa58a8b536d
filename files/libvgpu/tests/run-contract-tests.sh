#!/bin/bash
# The container contract held against the container itself (issue 12): when the device plugin's
# read-only quota file is present, nothing in the environment moves the quota file, the region
# folder or any setting. Runs against the contract build (make check), whose fixed paths
# /etc/vgpu/quota.conf and /var/run/vgpu live under BUILD_DIR/root: a compile-time choice of
# that test build, which no environment can make. Usage: run-contract-tests.sh BUILD_DIR VARIANT
set -u
. "$(dirname "$0")/lib.sh"
ROOT=$(cat "$B/contract-root")
if [ -z "$ROOT" ]; then echo "FAIL [$V] $B is not a contract build" | tee -a "$RESULTS"; exit 1; fi
QUOTA=$ROOT/etc/vgpu/quota.conf
FIXED=$ROOT/var/run/vgpu

# A container as the device plugin makes it: the quota file at the fixed path, the region folder
# at the fixed path; then whatever the environment says (the container's to choose).
container() { # quota file lines...
    fresh
    rm -rf "$ROOT"
    mkdir -p "$(dirname "$QUOTA")" "$FIXED"
    printf '%s\n' "$@" >"$QUOTA"
    chmod 0444 "$QUOTA"
    unset VGPU_REGION_DIR VGPU_CONFIG_FILE VGPU_MEMORY_LIMIT VGPU_REAL_LIBCUDA VGPU_REAL_LIBNVML
    export LD_LIBRARY_PATH=$B:$B/fake # the real driver where a node's loader would find it
}

container memory_limit=0:100MiB context_reserve=0
printf 'memory_limit=0:1000MiB\n' >"$R/mine.conf"
export VGPU_CONFIG_FILE=$R/mine.conf VGPU_MEMORY_LIMIT=1000MiB
run init alloc:150 alloc:60 info
expect "VGPU_CONFIG_FILE cannot replace the device plugin's quota file" "alloc 150 v2 rc=2" "alloc 60 v2 rc=0" \
    "info rc=0 free=40 total=100"

container memory_limit=0:100MiB context_reserve=0
"$CLIENT" init alloc:60 hold:5 >"$R/p1" 2>&1 &
wait_for holding "$R/p1"
mkdir "$R/private"
VGPU_REGION_DIR=$R/private run init alloc:60 info
VGPU_REGION_DIR=$R/private "$MANAGE" --stats >"$R/stats" 2>&1
wait
expect "VGPU_REGION_DIR cannot take a process out of the container's accounting" "alloc 60 v2 rc=2" \
    "info rc=0 free=40 total=100"
if grep -q "region $FIXED/vgpu.region" "$R/stats" && grep -q "used 60.0 MiB" "$R/stats" && [ ! -e "$R/private/vgpu.region" ]; then
    pass "manage --stats reads the contract's region whatever VGPU_REGION_DIR says"
else OUT=$R/stats; fail "manage --stats with VGPU_REGION_DIR set"; fi

# (FAKE_NVML_PROCS=0: NVML gives no per-process figure, so each context is charged the reserve)
container memory_limit=0:1000MiB limit=1 gpu_virtual_memory=1 context_reserve=100MiB
export LIMIT=0 GPU_VIRTUAL_MEMORY=0 VGPU_CONTEXT_RESERVE=0 FAKE_NVML_PROCS=0
run init info alloc:950 alloc:850
expect "the environment cannot change a setting the quota file holds (limit, virtual memory, context charge)" \
    "info rc=0 free=900 total=1000" "alloc 950 v2 rc=2" "alloc 850 v2 rc=0"

container memory_limit=0:1000MiB
export VGPU_CONTEXT_RESERVE=0 LIMIT=0 FAKE_NVML_PROCS=0
run init info alloc:600
expect "nor one the file leaves out: the built-in defaults apply (512 MiB per context, enforcement on)" \
    "info rc=0 free=488 total=1000" "alloc 600 v2 rc=2"

# issue 38: the quota file is the root of trust for every override, the real driver's path too
container memory_limit=0:1000MiB context_reserve=0
export VGPU_REAL_LIBNVML=$B/liblinger.so # a library that is no NVML: nothing could be measured
run init module:700 module:700 info
if expect "VGPU_REAL_LIBNVML cannot blind libvgpu's measurements: the second 700 MiB module is refused" \
    "module 700 data rc=0" "module 700 data rc=2"; then
    grep -q "VGPU_REAL_LIBNVML=.* ignored: the device plugin's quota file" "$ERR" \
        && pass "the ignored VGPU_REAL_LIBNVML is said on stderr" || fail "no warning for the ignored VGPU_REAL_LIBNVML"
fi

container memory_limit=0:100MiB context_reserve=0
export VGPU_REAL_LIBCUDA=/nonexistent/libcuda.so.1
run init alloc:60 alloc:60
expect "VGPU_REAL_LIBCUDA cannot choose the driver under the quota file: the node's driver is found, the quota holds" \
    "init rc=0" "alloc 60 v2 rc=0" "alloc 60 v2 rc=2"

container memory_limit=0:100MiB
rmdir "$FIXED"
export VGPU_REGION_DIR=$R
run init alloc:10
if grep -q "init rc=3" "$OUT" && grep -q "$FIXED" "$ERR"; then
    pass "with the quota file present, a missing contract region folder fails closed (no private accounting)"
else fail "missing contract region folder"; fi

fresh 100MiB
rm -rf "$ROOT"
printf 'memory_limit=0:50MiB\n' >"$R/by-hand.conf"
export VGPU_CONFIG_FILE=$R/by-hand.conf
run init alloc:60 info
expect "without the device plugin's file the environment still configures a process run by hand" "alloc 60 v2 rc=2" \
    "info rc=0 free=50 total=50"
