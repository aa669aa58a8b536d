#!/usr/bin/env bash
# Runs molecule scenarios in JOBS parallel lanes:  tests/harness/molecule.sh JOBS SCENARIO...
# Most of a scenario's time is apt and dpkg in its container and ansible's round trips, not CPU,
# so two lanes on two cores take little more than the longer lane. Scenario i goes to lane
# i mod JOBS. Each scenario's output is in build/logs/molecule-<scenario>.log; a failure prints
# the end of its log, stops the other lanes and fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${1:?usage: $0 JOBS SCENARIO...}
shift
logs=$root/build/logs
mkdir -p "$logs"
molecule=${MOLECULE:-$root/.venv/bin/molecule}

lane() {
    local s started
    for s in "$@"; do
        started=$(date +%s)
        echo ">> molecule test -s $s (log: build/logs/molecule-$s.log)"
        if ! "$molecule" test -s "$s" >"$logs/molecule-$s.log" 2>&1; then
            tail -n 80 "$logs/molecule-$s.log" | sed "s/^/   [$s] /"
            echo "!! molecule scenario $s failed after $(($(date +%s) - started)) s (log: build/logs/molecule-$s.log)"
            return 1
        fi
        echo ">> molecule scenario $s passed in $(($(date +%s) - started)) s"
    done
}

scenarios=("$@")
pids=()
for ((i = 0; i < jobs; i++)); do
    mine=()
    for ((j = i; j < ${#scenarios[@]}; j += jobs)); do mine+=("${scenarios[j]}"); done
    ((${#mine[@]})) || continue
    lane "${mine[@]}" &
    pids+=($!)
done
status=0
for ((n = 0; n < ${#pids[@]}; n++)); do
    if ! wait -n "${pids[@]}"; then
        status=1
        for pid in "${pids[@]}"; do pkill -TERM -P "$pid" 2>/dev/null; kill "$pid" 2>/dev/null; done
        break
    fi
done
wait 2>/dev/null
exit $status
