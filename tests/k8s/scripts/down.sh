#!/usr/bin/env bash
# Stop every process up.sh (or the tests, through ctl.sh) started, newest first, by recorded pid,
# and remove etcd's temporary data. Safe to run when nothing is up.
set -uo pipefail
# shellcheck source=/dev/null
source "$(dirname "$0")/lib.sh"
for name in kube-scheduler extender kwok kube-controller-manager kube-apiserver etcd; do
    stop_proc "$name"
done
# Anything else a test started through ctl.sh.
if [[ -d "$STATE_DIR/pids" ]]; then
    for file in "$STATE_DIR"/pids/*.pid; do
        [[ -e "$file" ]] && stop_proc "$(basename "$file" .pid)"
    done
fi
if [[ -f "$STATE_DIR/etcd-data-dir" ]]; then
    data="$(cat "$STATE_DIR/etcd-data-dir")"
    case "$data" in /dev/shm/vgpu-e2e-etcd.* | /tmp/tmp.*) rm -rf "$data" ;; esac
    rm -f "$STATE_DIR/etcd-data-dir"
fi
exit 0
