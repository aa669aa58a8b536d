#!/usr/bin/env bash
# up, the pytest suite, down. The trap tears down on success, failure and interruption.
set -euo pipefail
# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
trap '"$K8S_DIR/scripts/down.sh"' EXIT
trap 'exit 130' INT TERM
"$K8S_DIR/scripts/up.sh"
cd "$REPO_ROOT"
# The cluster modules' live tests first (they expect a server without the stack and remove what
# they apply), then the suite, against the same API server (kwok nodes, and the real
# kube-scheduler to check the shipped scheduler configuration).
VGPU_K8S_STATE_DIR="$STATE_DIR" PYTHONPATH="$REPO_ROOT" \
    VGPU_TEST_KUBECONFIG="$STATE_DIR/admin.kubeconfig" VGPU_TEST_KWOK=1 \
    VGPU_TEST_KUBE_SCHEDULER="$BIN_DIR/kube-scheduler" timeout 1800 \
    "$VENV/bin/pytest" -p no:cacheprovider -q tests/unit/plugins/modules/test_vgpu_k8s_live.py tests/k8s "$@"
