#!/usr/bin/env bash
# bench/profile_extender_gil.sh PY_SPY OUT_DIR [RUNS] [SECONDS]: who holds the extender's interpreter
# lock while bench/scheduling_throughput.py runs its extender mode. Start it beside the bench (it waits
# for the bench): for each of the first RUNS (default 2) extender runs it samples the thread holding
# the lock (py-spy record --gil --threads, 250 Hz, SECONDS (default 8) from one second after that
# run's kube-scheduler started) into OUT_DIR/extender-gil-N.txt, py-spy's folded stacks (a stack and
# its sample count per line). Read the shares, not absolute times: a sample is 4 ms of the lock.
set -euo pipefail
py_spy=${1:?usage: $0 PY_SPY OUT_DIR [RUNS] [SECONDS]}
out=${2:?usage: $0 PY_SPY OUT_DIR [RUNS] [SECONDS]}
runs=${3:-2}
seconds=${4:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=/dev/null
source "$root/tests/k8s/scripts/lib.sh"  # STATE_DIR
mkdir -p "$out"

scheduler() { pgrep -f "kube-scheduler --config=.*scheduler-extender.yaml" || true; }
# The harness's own start (up.sh) runs a kube-scheduler with the extender too, before the bench
# starts: skip that one.
until pgrep -f "bench.scheduling_throughput" >/dev/null; do sleep 0.2; done
last=$(scheduler)
for ((run = 1; run <= runs; run++)); do
    # The bench starts a fresh kube-scheduler for each run: wait for the next extender one.
    until pid=$(scheduler) && [[ -n $pid && $pid != "$last" ]]; do sleep 0.2; done
    last=$pid
    sleep 1
    extender=$(cut -d' ' -f1 "$STATE_DIR/pids/extender.pid")
    "$py_spy" record --gil --threads --nonblocking --rate 250 --duration "$seconds" --format raw \
        --output "$out/extender-gil-$run.txt" --pid "$extender" >"$out/py-spy-$run.log" 2>&1 \
        || echo ">> py-spy failed on run $run: $(tail -n 3 "$out/py-spy-$run.log")" >&2
    echo ">> extender run $run: $out/extender-gil-$run.txt"
done
