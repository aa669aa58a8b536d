#!/bin/sh
# PID 1 of the e2e node container (tests/node/node.sh), before systemd (or before the command given,
# for a node without systemd: tests/gpu/kubelet/emulate.sh): the container has its own
# cgroup namespace, and Docker mounts its cgroup hierarchies read-only. Mounted afresh inside the
# namespace they are read-write and rooted at the container's cgroup, so systemd and kubelet (with
# its systemd cgroup driver) agree on where kubepods.slice is, as on a real host.
set -eu
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
    umount /sys/fs/cgroup
    mount -t cgroup2 -o rw,nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
else
    for dir in /sys/fs/cgroup/*/; do
        name=$(basename "$dir")
        case "$name" in
            systemd) options=none,name=systemd ;;
            unified) continue ;;
            *) options=$name ;;
        esac
        umount "$dir"
        mount -t cgroup -o "rw,nosuid,nodev,noexec,$options" cgroup "$dir"
    done
fi
if [ "$#" -gt 0 ]; then
    exec "$@"
fi
exec /lib/systemd/systemd
