#!/usr/bin/env bash
# Runs molecule scenarios in JOBS parallel lanes:  tests/harness/molecule.sh JOBS SCENARIO...
# Most of a scenario's time is apt and dpkg in its container and ansible's round trips, not CPU,
# so two lanes on two cores take little more than the longer lane. The scenarios form one queue in
# the order given (make molecule puts the long ones first) and a lane that is done takes the next:
# the lanes end close together whatever each scenario takes on the machine. Each scenario's output
# is in build/logs/molecule-<scenario>.log; a failure prints the end of its log, stops the other
# lanes and fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
jobs=${1:?usage: $0 JOBS SCENARIO...}
shift
logs=$root/build/logs
mkdir -p "$logs"
molecule=${MOLECULE:-$root/.venv/bin/molecule}
scenarios=("$@")
queue=$(mktemp -d)
trap 'rm -rf "$queue"' EXIT
echo 0 >"$queue/next"

# The index of the next scenario nobody has taken (one lane at a time holds the lock).
take() {
    local i
    exec 8>"$queue/lock"
    flock 8
    i=$(cat "$queue/next")
    echo $((i + 1)) >"$queue/next"
    exec 8>&-
    echo "$i"
}

lane() {
    local i s started
    while i=$(take) && ((i < ${#scenarios[@]})); do
        s=${scenarios[i]}
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

pids=()
for ((n = 0; n < jobs && n < ${#scenarios[@]}; n++)); do
    lane &
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
