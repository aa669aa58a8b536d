#!/usr/bin/env bash
# up, bench/scheduling_throughput.py, down (always). kube-scheduler's client rate limit is
# raised so that neither configuration is capped by it (the extender binds with its own client).
# VGPU_BENCH_LIMIT_S: the whole bench's limit (default 3000 s; 5000 nodes x 10 pods on 2 cores
# takes longer).
set -euo pipefail
# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
trap '"$K8S_DIR/scripts/down.sh"' EXIT
trap 'exit 130' INT TERM
VGPU_E2E_SCHEDULER_QPS=5000 VGPU_E2E_SCHEDULER_BURST=5000 "$K8S_DIR/scripts/up.sh"
cd "$REPO_ROOT"
VGPU_K8S_STATE_DIR="$STATE_DIR" PYTHONPATH="$REPO_ROOT" timeout "${VGPU_BENCH_LIMIT_S:-3000}" \
    "$VENV/bin/python" -m bench.scheduling_throughput --json build/bench/scheduling_throughput.json "$@"
