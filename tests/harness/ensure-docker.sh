#!/usr/bin/env bash
# Makes sure a Docker engine answers: installs Debian's docker.io when no engine is installed,
# and starts dockerd in the background when none runs (CI machines have no init system for it).
set -euo pipefail

log() { echo ">> $*"; }

if ! command -v dockerd >/dev/null 2>&1; then
    log "installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io >/dev/null
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi

dockerd_log=${VGPU_DOCKERD_LOG:-/var/log/vgpu-dockerd.log}
log "starting dockerd (log: $dockerd_log)"
# Without the descriptors this shell inherited: under `flock /work/heavy.lock make ...` one of them
# is the lock, and a dockerd holding it would keep every later flock waiting for as long as it runs.
(
    for fd in /proc/"$BASHPID"/fd/*; do
        fd=${fd##*/}
        ((fd > 2)) && eval "exec $fd>&-"
    done
    exec nohup dockerd >"$dockerd_log" 2>&1
) &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        log "dockerd is up"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; last lines of its log:" >&2
tail -n 20 "$dockerd_log" >&2
exit 1
