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
VGPU_K8S_STATE_DIR="$STATE_DIR" PYTHONPATH="$REPO_ROOT" BIN_DIR="$BIN_DIR" timeout 1800 \
    "$VENV/bin/pytest" -p no:cacheprovider -q tests/k8s "$@"
