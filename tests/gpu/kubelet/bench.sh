#!/usr/bin/env bash
# The scheduling-throughput bench (bench/scheduling_throughput.py, through tests/k8s/scripts/run-bench.sh)
# on the GPU host, from the payload of `VGPU_KUBELET_SCENARIO=bench tests/gpu/kubelet/pack.sh`:
#   tests/gpu/kubelet/bench.sh [run-bench.sh arguments]
# Default arguments: --nodes 1000 --repeat 2 --modes plain claims extender. The same harness as on the
# 2-core machine, with the unpacked binaries where lib.sh looks for them (VGPU_CACHE_DIR), and a
# Python (VENV) that has the carried libraries. Writes to $OUT (default /tmp/vgpu-bench-logs):
# bench.log, scheduling_throughput.json, host.txt and, when the run failed, the daemons' logs.
# VGPU_BENCH_GIL_RUNS=N: py-spy samples the extender's lock holder in the first N extender runs
# (bench/profile_extender_gil.sh, 8 s each) into gil/, summed by bench/gil_shares.py into gil.txt.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
WORK=${VGPU_KUBELET_WORK:-/tmp/vgpu-kubelet}
PAYLOAD=$WORK/payload
LOG_DIR=${OUT:-/tmp/vgpu-bench-logs}
# shellcheck source=/dev/null
source "$ROOT/files/bundle/versions.env"
mkdir -p "$LOG_DIR"
die() { echo "!! $*" >&2; exit 1; }

for f in k8s/k8s-multicall "cache/k8s/kwok-$KWOK_VERSION/kwok" "cache/k8s/kwok-$KWOK_VERSION/stages.yaml" \
    "cache/k8s/etcd-$ETCD_VERSION/etcd" bench-site/kubernetes/__init__.py; do
    [[ -e $PAYLOAD/$f ]] || die "the payload lacks $f: run the carry calls of VGPU_KUBELET_SCENARIO=bench pack.sh (unpack.sh) first"
done
export VGPU_CACHE_DIR=$PAYLOAD/cache
bin=$VGPU_CACHE_DIR/k8s/$K8S_VERSION
mkdir -p "$bin" "$WORK/bin"
for name in kube-apiserver kube-controller-manager kube-scheduler kubectl; do ln -sf "$PAYLOAD/k8s/k8s-multicall" "$bin/$name"; done

# A Python for the harness ($VENV/bin/python): a virtualenv without pip whose .pth file adds the
# carried libraries first, the components of this tree (the bench imports them), then the host python3's own (on the H200 itself a virtualenv, whose
# libraries a plain virtualenv of it would lose).
export VENV=$WORK/bench-python
rm -rf "$VENV"
python3 -m venv --without-pip --system-site-packages "$VENV"
host_sites=$(python3 -c 'import sys; print("\n".join(p for p in sys.path if p.endswith(("site-packages", "dist-packages"))))')
"$VENV/bin/python" -c 'import site; print(site.getsitepackages()[0])' \
    | { read -r site_dir; printf '%s\n' "$PAYLOAD/bench-site" "$ROOT/files/components/src" "$host_sites" >"$site_dir/vgpu-bench-payload.pth"; }
"$VENV/bin/python" -c 'import kubernetes, yaml, prometheus_client, grpc_tools, vgpu_components' || die "the carried libraries do not import in $VENV"
# Hosts without curl or openssl: the Python stand-ins of run.sh.
if ! command -v curl >/dev/null; then
    printf '#!/bin/sh\nexec %s %s "$@"\n' "$VENV/bin/python" "$HERE/httpget.py" >"$WORK/bin/curl"
    chmod 0755 "$WORK/bin/curl"
fi
command -v openssl >/dev/null || export VGPU_E2E_CERTS_COMMAND="$VENV/bin/python $HERE/pki.py"
export PATH=$WORK/bin:$PATH VGPU_K8S_STATE_DIR=$WORK/bench-state

{
    echo "== date"; date -u
    echo "== cpu"; nproc; grep -m1 'model name' /proc/cpuinfo
    echo "== memory"; grep MemTotal /proc/meminfo
    echo "== load"; cat /proc/loadavg
    echo "== python"; "$VENV/bin/python" --version
    echo "== tools"; command -v curl openssl
} >"$LOG_DIR/host.txt" 2>&1

[[ $# -gt 0 ]] || set -- --nodes 1000 --repeat 2 --modes plain claims extender
profiler=""
if [[ ${VGPU_BENCH_GIL_RUNS:-0} -gt 0 ]]; then
    "$ROOT/bench/profile_extender_gil.sh" "$PAYLOAD/bench-site/bin/py-spy" "$LOG_DIR/gil" "$VGPU_BENCH_GIL_RUNS" &
    profiler=$!
fi
rc=0
"$ROOT/tests/k8s/scripts/run-bench.sh" "$@" 2>&1 | tee "$LOG_DIR/bench.log" || rc=$?
if [[ -n $profiler ]]; then
    kill "$profiler" 2>/dev/null || true
    wait "$profiler" 2>/dev/null || true
    "$VENV/bin/python" "$ROOT/bench/gil_shares.py" "$LOG_DIR"/gil/extender-gil-*.txt >"$LOG_DIR/gil.txt" 2>&1 || true
fi
cp "$ROOT/build/bench/scheduling_throughput.json" "$LOG_DIR/" 2>/dev/null || true
if ((rc != 0)); then
    for log in "$VGPU_K8S_STATE_DIR"/logs/*.log; do
        [[ -f $log ]] && tail -n 80 "$log" >"$LOG_DIR/$(basename "$log")"
    done
fi
exit "$rc"
