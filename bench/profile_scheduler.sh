#!/usr/bin/env bash
# bench/profile_scheduler.sh MODE [NODES] [SECONDS]: where kube-scheduler spends its CPU in one
# mode of bench/scheduling_throughput.py (plain, extender, claims, ...). It runs the bench once for
# that mode (then plain, the baseline the bench requires) at NODES nodes (default 1000) with
# kube-scheduler's /debug/pprof open on loopback, takes a CPU profile of SECONDS (default 20) as
# soon as kube-scheduler starts on the Pending pods, and prints its top functions.
# Profile: build/bench/kube-scheduler-MODE-NODES.pprof (go tool pprof).
set -euo pipefail
mode=${1:?usage: $0 MODE [NODES] [SECONDS]}
nodes=${2:-1000}
seconds=${3:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
source "$root/tests/k8s/scripts/lib.sh"  # SCHEDULER_PORT
out=$root/build/bench/kube-scheduler-$mode-$nodes.pprof
mkdir -p "$(dirname "$out")"
rm -f "$out"

pids() { pgrep -f "kube-scheduler --config" || true; }
capture() {
    local first
    # The bench stops kube-scheduler, creates the pods, then starts it: profile that new one.
    until [[ -n $(pids) ]]; do sleep 1; done
    first=$(pids)
    while [[ $(pids) == "$first" || -z $(pids) ]]; do sleep 0.5; done
    until curl -skf --max-time 2 "https://127.0.0.1:$SCHEDULER_PORT/readyz" >/dev/null; do sleep 0.2; done
    curl -sk --max-time $((seconds + 30)) -o "$out" \
        "https://127.0.0.1:$SCHEDULER_PORT/debug/pprof/profile?seconds=$seconds"
    echo ">> CPU profile of kube-scheduler ($seconds s, mode $mode, $nodes nodes): $out"
}
capture &
catcher=$!
modes=("$mode")
[[ $mode == plain ]] || modes+=(plain)
VGPU_E2E_SCHEDULER_PPROF=1 "$root/tests/k8s/scripts/run-bench.sh" \
    --nodes "$nodes" --repeat 1 --settle 10 --modes "${modes[@]}"
wait "$catcher"
go tool pprof -top -nodecount=35 "$out" 2>/dev/null | head -45
