#!/usr/bin/env bash
# Restart single parts of a running control plane; used by the tests and the benchmark.
#   ctl.sh start-extender [plain] | stop-extender | start-scheduler [config] | stop-scheduler
set -euo pipefail
# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
case "${1:-}" in
    start-extender) start_extender "${2:-}" ;;
    stop-extender) stop_proc extender ;;
    start-scheduler) start_scheduler "${2:-}" ;;
    stop-scheduler) stop_proc kube-scheduler ;;
    *) die "usage: $0 start-extender [plain]|stop-extender|start-scheduler [config]|stop-scheduler (got '${1:-}')" ;;
esac
