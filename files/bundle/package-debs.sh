#!/usr/bin/env bash
# Packs the binaries built by build-binaries.sh as Debian packages with dpkg-deb: kubeadm, kubelet,
# kubectl and cri-tools (the file layout and dependencies of the pkgs.k8s.io packages of the same
# names), flannel (flanneld), nvidia-container-toolkit-base (the layout of NVIDIA's package: nvidia-ctk,
# nvidia-container-runtime, nvidia-cdi-hook) and, when build-binaries.sh built it, containerd
# $CONTAINERD_VERSION (the DRA path's runtime, whose CRI applies CDI devices: it upgrades Debian 12's
# containerd 1.6 package of the same name). Sites that reach pkgs.k8s.io and NVIDIA's repository
# download those packages instead; this is how they are made where only the Go module proxy is.
#
# Usage: files/bundle/package-debs.sh OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
out=${1:?usage: $0 OUT_DIR}
cache="${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}/k8s"
k8s_bin="$cache/$K8S_VERSION"
k8s_ver=${K8S_VERSION#v}
maintainer="vgpu.isolation <vgpu-isolation@users.noreply.github.com>"
arch=$(dpkg --print-architecture)
mkdir -p "$out"
work=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-debs.XXXXXX")
trap 'rm -rf "$work"' EXIT

# package <name> <version> <depends> <description> <src:dest>...
package() {
    local name="$1" version="$2" depends="$3" description="$4" root pair src dest
    shift 4
    root="$work/$name"
    mkdir -p "$root/DEBIAN"
    for pair in "$@"; do
        src=${pair%%:*} dest=${pair#*:}
        install -D -m "$( [[ -x $src ]] && echo 0755 || echo 0644 )" "$src" "$root$dest"
    done
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: $arch"
        echo "Maintainer: $maintainer"
        [[ -z $depends ]] || echo "Depends: $depends"
        echo "Section: admin"
        echo "Priority: optional"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
        echo "Description: $description"
        echo " Built by vgpu.isolation from the pinned upstream sources (files/bundle/upstream)."
    } >"$root/DEBIAN/control"
    # Reproducible: fixed timestamps, owners and order, so the bundle's SHA256SUMS is stable.
    find "$root" -exec touch -h -d @0 {} +
    local deb="$out/${name}_${version}_${arch}.deb" key
    # Packed again only when what goes into it changed (its key: the hash of the package's tree).
    key=$(cd "$root" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
    if [[ -s $deb && $(cat "$deb.key" 2>/dev/null) == "$key" ]]; then
        echo ">> reusing $deb"
        return 0
    fi
    # gzip: every dpkg reads it, and it packs a 100 MB binary in seconds where xz takes minutes on
    # two cores; the bundle is about a third larger for it.
    dpkg-deb --root-owner-group -Zgzip -z6 --build "$root" "$deb" >/dev/null
    echo "$key" >"$deb.key"
    echo ">> packed $deb"
}

for f in kubeadm kubelet kubectl; do
    [[ -x $k8s_bin/$f ]] || { echo "!! $k8s_bin/$f is missing: run files/bundle/build-binaries.sh first" >&2; exit 1; }
done

package kubelet "$k8s_ver-1" "iptables, iproute2, mount, util-linux" \
    "Kubernetes node agent" \
    "$k8s_bin/kubelet:/usr/bin/kubelet" \
    "$here/kubelet.service:/usr/lib/systemd/system/kubelet.service" \
    "$here/10-kubeadm.conf:/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"
package kubectl "$k8s_ver-1" "" "Kubernetes command-line tool" "$k8s_bin/kubectl:/usr/bin/kubectl"
package cri-tools "${CRI_TOOLS_VERSION#v}-1" "" "Command-line tools for CRI runtimes (crictl)" \
    "$cache/cri-tools-$CRI_TOOLS_VERSION/crictl:/usr/bin/crictl"
package kubeadm "$k8s_ver-1" "kubelet (>= ${k8s_ver%.*}), kubectl (>= ${k8s_ver%.*}), cri-tools (>= ${CRI_TOOLS_VERSION#v})" \
    "Kubernetes cluster bootstrapping tool" "$k8s_bin/kubeadm:/usr/bin/kubeadm"

flanneld="$cache/flannel-$FLANNEL_VERSION/flanneld"
[[ -x $flanneld ]] || { echo "!! $flanneld is missing: run files/bundle/build-binaries.sh first" >&2; exit 1; }
# The binary only: the kubeadm role writes its unit (kubeadm_cni flannel) and the CNI configuration.
package flannel "${FLANNEL_VERSION#v}-1" "libc6, iptables, iproute2" "flanneld, the pod network between Kubernetes nodes (VXLAN)" \
    "$flanneld:/usr/bin/flanneld"

toolkit="$cache/nvidia-container-toolkit-$TOOLKIT_VERSION"
root="$work/nvidia-container-toolkit-base"
mkdir -p "$root/DEBIAN"
# NVIDIA's postinst writes the runtime's default configuration; the role then sets its mode.
cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
    /usr/bin/nvidia-ctk --quiet config --config-file=/etc/nvidia-container-runtime/config.toml --in-place
fi
exit 0
POSTINST
chmod 0755 "$root/DEBIAN/postinst"
package nvidia-container-toolkit-base "${TOOLKIT_VERSION#v}-1" "libc6" "NVIDIA Container Toolkit Base" \
    "$toolkit/nvidia-ctk:/usr/bin/nvidia-ctk" \
    "$toolkit/nvidia-container-runtime:/usr/bin/nvidia-container-runtime" \
    "$toolkit/nvidia-cdi-hook:/usr/bin/nvidia-cdi-hook"

containerd="$cache/containerd-$CONTAINERD_VERSION"
if [[ -x $containerd/containerd ]]; then
    root="$work/containerd"
    mkdir -p "$root/DEBIAN"
    # Debian's package started the unit; this one replaces its files, so systemd rereads the unit.
    cat >"$root/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi
exit 0
POSTINST
    chmod 0755 "$root/DEBIAN/postinst"
    package containerd "${CONTAINERD_VERSION#v}-0vgpu1" "runc (>= 1.1)" "containerd container runtime, with CDI in its CRI" \
        "$containerd/containerd:/usr/bin/containerd" \
        "$containerd/containerd-shim-runc-v2:/usr/bin/containerd-shim-runc-v2" \
        "$containerd/ctr:/usr/bin/ctr" \
        "$here/containerd.service:/usr/lib/systemd/system/containerd.service"
fi
