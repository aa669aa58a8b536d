#!/usr/bin/env bash
# up, the pytest suite, down. The trap tears down on success, failure and interruption.
set -euo pipefail
# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
trap '"$K8S_DIR/scripts/down.sh"' EXIT
trap 'exit 130' INT TERM
"$K8S_DIR/scripts/up.sh"
cd "$REPO_ROOT"
# The suite against the API server (kwok nodes, and the real kube-scheduler to check the shipped
# scheduler configuration).
status=0
VGPU_K8S_STATE_DIR="$STATE_DIR" PYTHONPATH="$REPO_ROOT" BIN_DIR="$BIN_DIR" timeout 1800 \
    "$VENV/bin/pytest" -p no:cacheprovider -q tests/k8s "$@" || status=$?
if ((status)); then
    # What the extender and kube-scheduler last said: CI keeps this output, not the state folder.
    for component in extender kube-scheduler; do
        echo ">> the warnings and errors $component last logged ($STATE_DIR/logs/$component.log)"
        grep -E ' (WARNING|ERROR) |^[EW][0-9]{4} ' "$STATE_DIR/logs/$component.log" | tail -n 25 || true
    done
fi
exit "$status"
