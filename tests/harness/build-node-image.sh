#!/usr/bin/env bash
# Builds localhost/vgpu-node:debian12, the Debian 12 systemd image molecule converges, from a
# debootstrap root filesystem (nothing is pulled). The image is tagged with the hash of this
# recipe and rebuilt only when the recipe changes; the .deb files are cached between builds.
set -euo pipefail

IMAGE=localhost/vgpu-node
SUITE=bookworm
MIRROR=${VGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE_DIR=${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}
# git and make: what an operator has on a fresh machine to clone the checkout and run `make site`
# (the e2e node provisions itself that way); openssh: the e2e site's control plane runs `make site`
# for all three nodes over SSH (tests/site/run-e2e.sh), as an operator's machine does.
PACKAGES=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,ca-certificates,procps,iproute2,kmod,gnupg,curl,git,make,openssh-server,openssh-client
recipe_hash=$(sha256sum "$0" | cut -c1-12)

log() { echo ">> $*"; }

if docker image inspect "$IMAGE:$recipe_hash" >/dev/null 2>&1; then
    docker tag "$IMAGE:$recipe_hash" "$IMAGE:debian12"
    log "$IMAGE:debian12 is up to date ($recipe_hash)"
    exit 0
fi

command -v debootstrap >/dev/null || {
    log "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}

rootfs=$(mktemp -d /var/tmp/vgpu-node-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$CACHE_DIR/debs"

log "debootstrap $SUITE into $rootfs (takes a few minutes on a cold cache)"
debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE_DIR/debs" \
    "$SUITE" "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 || {
    tail -n 30 "$rootfs.log" >&2
    exit 1
}
rm -f "$rootfs.log"

cat >"$rootfs/etc/apt/sources.list" <<SOURCES
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
SOURCES
# A container has no consoles, udev or kernel modules to load: keep systemd from waiting on them.
for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
    systemd-modules-load.service sys-kernel-debug.mount sys-kernel-tracing.mount \
    systemd-remount-fs.service systemd-firstboot.service; do
    ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
echo "vgpu-node" >"$rootfs/etc/hostname"
: >"$rootfs/etc/machine-id"
chroot "$rootfs" apt-get clean
rm -rf "$rootfs"/var/lib/apt/lists/*

log "importing the root filesystem as $IMAGE:$recipe_hash"
tar -C "$rootfs" -c . | docker import \
    --change 'CMD ["/lib/systemd/systemd"]' \
    --change 'ENV container=docker' \
    - "$IMAGE:$recipe_hash" >/dev/null
docker tag "$IMAGE:$recipe_hash" "$IMAGE:debian12"
log "built $IMAGE:debian12 ($recipe_hash)"
