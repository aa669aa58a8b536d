#!/usr/bin/env bash
# Builds the images kubeadm deploys, under the names kubeadm pulls (registry.k8s.io/...), from the
# binaries of build-binaries.sh, and saves them into one docker-archive that the kubeadm role
# imports into containerd: kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
# etcd and pause. Nothing is pulled: the static binaries go into images built from scratch, and
# kube-proxy, which runs iptables, gets a debootstrap Debian 12 root filesystem with iptables.
# CoreDNS is not built: the kubeadm role skips the addon/coredns phase by default.
#
# Usage: files/bundle/build-images.sh OUT_TAR
# Reuses OUT_TAR when its recorded inputs (this recipe, the binaries' build stamps) are unchanged.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
out=${1:?usage: $0 OUT_TAR}
cache_root="${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}"
cache="$cache_root/k8s"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
modcache=$(go env GOMODCACHE)
registry=registry.k8s.io
pause_source="$modcache/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c"

log() { echo ">> $*"; }

inputs=$(cat "$0" "$cache/$K8S_VERSION/.stamp" "$cache/etcd-$ETCD_VERSION/.stamp" | sha256sum | cut -c1-16)
if [[ -s $out && "$(cat "$out.inputs" 2>/dev/null)" == "$inputs" ]]; then
    log "reusing $out"
    exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-k8s-images.XXXXXX")
trap 'rm -rf "$work"' EXIT

# image <name:tag> <rootfs dir> [docker import --change ...]
image() {
    local ref="$1" rootfs="$2"; shift 2
    find "$rootfs" -exec touch -h -d @0 {} +
    tar -C "$rootfs" --numeric-owner --sort=name -c . | docker import "$@" - "$ref" >/dev/null
    images+=("$ref")
    log "built $ref"
}
images=()

for name in kube-apiserver kube-controller-manager kube-scheduler; do
    mkdir -p "$work/$name/usr/local/bin"
    install -m 0755 "$cache/$K8S_VERSION/$name" "$work/$name/usr/local/bin/"
    image "$registry/$name:$K8S_VERSION" "$work/$name" --change "ENTRYPOINT [\"/usr/local/bin/$name\"]"
done

mkdir -p "$work/etcd/usr/local/bin" "$work/etcd/var/lib/etcd"
install -m 0755 "$cache/etcd-$ETCD_VERSION/etcd" "$work/etcd/usr/local/bin/"
image "$registry/etcd:$KUBEADM_ETCD_TAG" "$work/etcd" --change 'CMD ["/usr/local/bin/etcd"]'

# pause: upstream's own pause.c from the pinned module, linked statically.
mkdir -p "$work/pause"
gcc -Os -static -DVERSION="$PAUSE_VERSION" -o "$work/pause/pause" "$pause_source"
strip "$work/pause/pause"
image "$registry/pause:$PAUSE_VERSION" "$work/pause" --change 'ENTRYPOINT ["/pause"]'

# kube-proxy: a Debian 12 minbase with iptables (its iptables-nft, as upstream's image uses).
proxy_recipe="suite=bookworm variant=minbase include=iptables,conntrack mirror=$mirror"
proxy_base="$cache_root/rootfs/debian12-iptables-$(printf '%s' "$proxy_recipe" | sha256sum | cut -c1-16).tar"
if [[ ! -s $proxy_base ]]; then
    log "debootstrap bookworm (minbase + iptables) for kube-proxy into the cache"
    mkdir -p "$cache_root/rootfs" "$cache_root/debs"
    nice -n 10 debootstrap --variant=minbase --include=iptables,conntrack --cache-dir="$cache_root/debs" \
        bookworm "$work/proxy-base" "$mirror" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }
    rm -rf "$work/proxy-base/var/lib/apt/lists/"* "$work/proxy-base/var/cache/apt/"* \
        "$work/proxy-base/usr/share/doc/"* "$work/proxy-base/usr/share/man/"* "$work/proxy-base/usr/share/locale/"*
    tar -C "$work/proxy-base" --numeric-owner -cf "$proxy_base.tmp" .
    mv "$proxy_base.tmp" "$proxy_base"
    rm -rf "$work/proxy-base"
fi
mkdir -p "$work/kube-proxy"
tar -C "$work/kube-proxy" -xf "$proxy_base"
install -m 0755 "$cache/$K8S_VERSION/kube-proxy" "$work/kube-proxy/usr/local/bin/"
image "$registry/kube-proxy:$K8S_VERSION" "$work/kube-proxy" --change 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]'

mkdir -p "$(dirname "$out")"
docker save -o "$out.tmp" "${images[@]}"
mv -f "$out.tmp" "$out"
echo "$inputs" >"$out.inputs"
log "saved ${#images[@]} images into $out ($(du -h "$out" | cut -f1))"
