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

log "starting dockerd (log: /var/log/vgpu-dockerd.log)"
nohup dockerd >/var/log/vgpu-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        log "dockerd is up"
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; last lines of its log:" >&2
tail -n 20 /var/log/vgpu-dockerd.log >&2
exit 1
