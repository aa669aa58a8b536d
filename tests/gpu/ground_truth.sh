#!/usr/bin/env bash
# Ground truth on a real GPU host (issue 12), one command:  tests/gpu/ground_truth.sh [LOG_DIR]
# cgpu-monitor's detection core (files/components/src/vgpu_components/ground_truth.py) with the
# real driver's per-process accounting (NVML), driven over a given pid -> container mapping,
# since this host has no kubelet. A "container" is libvgpu's environment (quota file, region
# folder), as in tests/gpu/run.sh.
#   1. tamper: a process allocates under libvgpu while a second one keeps zeroing the region's
#      counters; whatever it gets past its quota must be caught within the grace period;
#   2. bypass: a process that never loads libvgpu (the real libcuda) allocates past its quota:
#      caught within the grace period;
#   3. honest: PyTorch under libvgpu filling its quota and running cuBLAS is not flagged; the gap
#      between NVML's real use and libvgpu's account (used + charged contexts) is printed: it is
#      what monitor.context_allowance_mib must cover.
# Needs gcc, make, python3 with pynvml and PyTorch, root. Prints PASS/FAIL lines and the numbers;
# the last line is "N passed, N failed". Writes LOG_DIR/ground-truth.log. Default LOG_DIR: $OUT,
# else /tmp/vgpu-gpu-logs. Takes about 2 minutes.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
LOG_DIR=${1:-${OUT:-/tmp/vgpu-gpu-logs}}
mkdir -p "$LOG_DIR"
LOG=$LOG_DIR/ground-truth.log
RESULTS=$LOG_DIR/ground-truth-results.txt
: >"$LOG"
: >"$RESULTS"
PY=${PYTHON:-python3}
PREFIX=${VGPU_TEST_PREFIX:-/tmp/vgpu-gt-prefix}
BUILD=$ROOT/files/libvgpu/build/gt
GRACE=5        # monitor.grace_seconds for these checks
INTERVAL=1     # monitor.check_interval_s
ALLOWANCE=512  # monitor.context_allowance_mib (the shipped default)
export PYTHONPATH=$ROOT/files/components/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
ORIG_LLP=${LD_LIBRARY_PATH:-}
WORK=$(mktemp -d /tmp/vgpu-gt.XXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$WORK"' EXIT

say() { echo "$*" | tee -a "$LOG"; }
pass() { echo "PASS $1" | tee -a "$RESULTS" "$LOG"; }
fail() { echo "FAIL $1" | tee -a "$RESULTS" "$LOG"; }
wait_for() { for _ in $(seq 300); do grep -q "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done; return 1; }
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }
# verdict COMMAND...: run it, log and show its one-line verdict, return its status.
verdict() { local out status; out=$("$@"); status=$?; say "$out"; return $status; }

# A fresh "container" with a quota of $1 MiB, as the device plugin would write it.
container() {
    C=$(mktemp -d "$WORK/ctr.XXXX")
    printf 'memory_limit=0:%sMiB\ngpu_virtual_memory=1\nlimit=1\ngpu_cgroup_enable=0\ncgroup_map_mode=0\ngpu_compute_audit=0\n' \
        "$1" >"$C/quota.conf"
}
in_container() { env VGPU_REGION_DIR="$C" VGPU_CONFIG_FILE="$C/quota.conf" LD_LIBRARY_PATH="$PREFIX${ORIG_LLP:+:$ORIG_LLP}" "$@"; }

# detect PID NAME QUOTA_MIB SECONDS: the detection core until a violation or SECONDS; JSON lines in $C/detect.
detect() {
    "$PY" -m vgpu_components.ground_truth --pid "$1=gt/$2/main:$3" --grace "$GRACE" --interval "$INTERVAL" \
        --allowance-mib "$ALLOWANCE" --duration "$4" --until-violation >"$C/detect" 2>>"$LOG"
}

# caught NAME: PASS when a violation came within the grace period (+ two checks) of going over.
caught() {
    cat "$C/detect" >>"$LOG"
    "$PY" - "$C/detect" "$GRACE" "$INTERVAL" <<'EOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
grace, interval = float(sys.argv[2]), float(sys.argv[3])
over = next((l["t"] for l in lines if "used_mib" in l and l["used_mib"] > l["limit_mib"]), None)
caught = next((l for l in lines if "violation" in l), None)
peak = max((l["used_mib"] for l in lines if "used_mib" in l), default=0)
limit = next((l["limit_mib"] for l in lines if "limit_mib" in l), 0)
if caught is None or over is None:
    print(f"no violation: real peak {peak} MiB, limit {limit} MiB")
    sys.exit(1)
delay = caught["t"] - over
print(f"real use {peak} MiB over the limit {limit} MiB at t={over:.1f} s, caught at t={caught['t']:.1f} s "
      f"({delay:.1f} s later; grace {grace:g} s): {caught['violation']}")
sys.exit(0 if delay <= grace + 2 * interval else 1)
EOF
}

# ---------------------------------------------------------------- build
say "==== build libvgpu (gcc $(gcc -dumpversion)) into $PREFIX"
if make -C "$ROOT/files/libvgpu" OUT=build/gt all test-bins >>"$LOG" 2>&1 \
    && make -C "$ROOT/files/libvgpu" OUT=build/gt install PREFIX="$PREFIX" >>"$LOG" 2>&1; then
    pass "libvgpu builds and installs"
else
    fail "libvgpu build"; echo "0 passed, 1 failed"; exit 1
fi
"$PY" -c "import pynvml; pynvml.nvmlInit(); print('driver', pynvml.nvmlSystemGetDriverVersion())" 2>&1 | tee -a "$LOG"
CLIENT=$BUILD/vgpu-test-client

# ---------------------------------------------------------------- 1. tamper
say ""
say "==== 1. tamper: quota 2000 MiB, 6 x 600 MiB under libvgpu while another process zeroes the region"
container 2000
in_container "$CLIENT" init alloc:600 hold:1 alloc:600 hold:1 alloc:600 hold:1 alloc:600 hold:1 alloc:600 hold:1 \
    alloc:600 hold:40 >"$C/client" 2>&1 &
client=$!
"$PY" - "$C/vgpu.region" 25 <<'EOF' >>"$LOG" 2>&1 &
# The tamperer: zero device 0's used_bytes and ctx_bytes (docs: files/libvgpu/docs/region-format.md).
import mmap, os, sys, time
path, end = sys.argv[1], time.time() + float(sys.argv[2])
while (not os.path.exists(path) or os.path.getsize(path) < 4096) and time.time() < end:
    time.sleep(0.005)
region = mmap.mmap(os.open(path, os.O_RDWR), 4096)
writes = 0
while time.time() < end:
    region[1024 + 8:1024 + 24] = bytes(16)
    writes += 1
    time.sleep(0.002)
print(f"tamperer: zeroed the region's counters {writes} times")
EOF
wait_for "alloc 600" "$C/client"
detect "$client" tamper 2000 25
granted=$(grep -c 'alloc 600 v2 rc=0' "$C/client")
cat "$C/client" >>"$LOG"
say "libvgpu granted $granted of 6 x 600 MiB under a 2000 MiB quota (honestly it grants 2: 2 x 600 + a 512 MiB context charge)"
if verdict caught tamper; then
    pass "tamper: the process that zeroed its region and allocated past its quota is caught within the grace period"
elif [ "$granted" -le 2 ]; then
    pass "tamper: libvgpu refused every allocation past the quota despite the zeroed region (nothing to catch)"
else
    fail "tamper: libvgpu granted $granted x 600 MiB and the detection did not catch it in time"
fi
stop "$client"

# ---------------------------------------------------------------- 2. bypass
say ""
say "==== 2. bypass: quota 2000 MiB, a process on the real driver (no libvgpu) takes 3000 MiB"
container 2000
env LD_LIBRARY_PATH="$ORIG_LLP" "$CLIENT" init alloc:3000 hold:40 >"$C/client" 2>&1 &
client=$!
wait_for "holding" "$C/client"
cat "$C/client" >>"$LOG"
detect "$client" bypass 2000 40
if ! grep -q 'alloc 3000 v2 rc=0' "$C/client"; then
    fail "bypass: the process could not allocate 3000 MiB on the real driver"
elif verdict caught bypass; then
    pass "bypass: a process past its quota without libvgpu is caught within the grace period"
else
    fail "bypass: not caught in time"
fi
stop "$client"

# ---------------------------------------------------------------- 3. honest
say ""
say "==== 3. honest: quota 4000 MiB, PyTorch fills 2500 MiB and runs cuBLAS under libvgpu (allowance $ALLOWANCE MiB)"
container 4000
in_container timeout 120 "$PY" -c "
import time, torch
x = torch.empty(2500 << 20, dtype=torch.uint8, device='cuda'); x.fill_(1)
a = torch.randn(4096, 4096, device='cuda'); b = a @ a; c = torch.nn.functional.conv2d(
    torch.randn(8, 64, 128, 128, device='cuda'), torch.randn(64, 64, 3, 3, device='cuda'))
torch.cuda.synchronize()
print('holding', flush=True)
time.sleep(40)
" >"$C/client" 2>&1 &
client=$!
wait_for "holding" "$C/client"
detect "$client" honest 4000 15
account=$(in_container "$PREFIX/manage" --stats --json 2>/dev/null | "$PY" -c "
import json, sys
d = json.load(sys.stdin)['devices'][0]
print((d['used_bytes'] + d['ctx_bytes']) >> 20)" 2>/dev/null || echo 0)
real=$("$PY" -c "
import json, sys
print(max((json.loads(l).get('used_mib', 0) for l in open(sys.argv[1]) if l.strip()), default=0))" "$C/detect")
say "PyTorch process: NVML real use $real MiB, libvgpu's account (used + charged context) $account MiB: gap $((real - account)) MiB (allowance $ALLOWANCE MiB per container)"
cat "$C/detect" >>"$LOG"
if grep -q violation "$C/detect"; then
    fail "honest: a PyTorch process within its quota was flagged (gap $((real - account)) MiB > allowance)"
elif [ "$real" -gt 0 ]; then
    pass "honest: PyTorch within its quota is not flagged (real $real MiB, limit $((4000 + ALLOWANCE)) MiB)"
else
    fail "honest: NVML showed no memory for the PyTorch process"
fi
stop "$client"

pass_n=$(grep -c '^PASS' "$RESULTS")
fail_n=$(grep -c '^FAIL' "$RESULTS")
say ""
say "$pass_n passed, $fail_n failed"
[ "$fail_n" = 0 ]
