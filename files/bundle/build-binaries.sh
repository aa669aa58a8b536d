#!/usr/bin/env bash
# Build the pinned upstream binaries into the cache, or reuse them when the cache already holds
# a build of the same go.mod/go.sum with the same Go toolchain. The control plane of the e2e
# harness and the offline bundle's node packages and images come from the same builds:
#   $CACHE/k8s/<K8S_VERSION>/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,
#                             kubelet,kubeadm,kubectl}
#   $CACHE/k8s/kwok-<KWOK_VERSION>/kwok
#   $CACHE/k8s/etcd-<ETCD_VERSION>/etcd
#   $CACHE/k8s/cri-tools-<CRI_TOOLS_VERSION>/crictl
#   $CACHE/k8s/nvidia-container-toolkit-<TOOLKIT_VERSION>/{nvidia-ctk,nvidia-container-runtime,nvidia-cdi-hook}
#   $CACHE/k8s/flannel-<FLANNEL_VERSION>/flanneld
# and, only when asked (`build-binaries.sh containerd`: the offline bundle's containerd-cdi/ and the
# GPU kubelet test's DRA scenario; the harness's control plane does not need it):
#   $CACHE/k8s/containerd-<CONTAINERD_VERSION>/{containerd,containerd-shim-runc-v2,ctr}
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=/dev/null
source "$here/versions.env"
cache="${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}/k8s"

# build_set <module dir> <output dir> <extra -ldflags> <package>...
# CGO (default 0, static binaries) is 1 for the toolkit, whose NVML binding dlopens the driver, and
# for flanneld.
build_set() {
    local module="$1" out="$2" ldflags="-s -w $3" cgo="${CGO:-0}"; shift 3
    # -w drops the debug information at the link, so the compiler need not write it: 12 % less
    # compile CPU, measured on etcd (whose .text came out the same size).
    local gcflags="all=-dwarf=false"
    local stamp key
    stamp="$out/.stamp"
    key="$(cat "$module/go.mod" "$module/go.sum" <(echo "$ldflags $gcflags $cgo $*") | sha256sum | cut -c1-16) $(go env GOVERSION)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$key" ]]; then
        echo ">> reusing $out"
        return 0
    fi
    echo ">> building $* into $out (log: $out.log)"
    mkdir -p "$out"
    local tmp started
    tmp="$(mktemp -d "$out.tmp.XXXXXX")"
    started="$(date +%s)"
    # Static, stripped, path-free binaries, as upstream's release builds; nice keeps the
    # shared build machine responsive.
    if ! (cd "$module" && CGO_ENABLED=$cgo nice -n 10 go build -trimpath -gcflags="$gcflags" -ldflags="$ldflags" -o "$tmp/" "$@") \
            >"$out.log" 2>&1; then
        tail -n 30 "$out.log" >&2
        rm -rf "$tmp"
        echo "!! go build failed for $*; full log in $out.log" >&2
        return 1
    fi
    mv -f "$tmp"/* "$out/"
    rmdir "$tmp"
    echo "$key" >"$stamp"
    echo ">> built $* in $(( $(date +%s) - started )) s"
}

extras=" $* "
for extra in "$@"; do
    [[ $extra == containerd ]] || { echo "!! unknown extra build '$extra': expected containerd" >&2; exit 2; }
done
command -v go >/dev/null || { echo "!! go is not on PATH (Go >= 1.26 is needed to build Kubernetes $K8S_VERSION)" >&2; exit 1; }
# One build at a time: `make test` starts this in the background early (tests/harness/prebuild.sh),
# and the layers that need the binaries wait here for it, then find its stamps.
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
if ! flock -n 9; then
    echo ">> waiting for another build of the upstream binaries (lock $cache/.build.lock)"
    flock 9
fi
# Upstream's release builds stamp the version the same way (hack/lib/version.sh); without it the
# binaries report v0.0.0-master.
minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
kube_version=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kube_version+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
build_set "$here/upstream/kubernetes" "$cache/$K8S_VERSION" "$kube_version" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kubeadm \
    k8s.io/kubernetes/cmd/kubectl
build_set "$here/upstream/kwok" "$cache/kwok-$KWOK_VERSION" "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
    sigs.k8s.io/kwok/cmd/kwok
build_set "$here/upstream/etcd" "$cache/etcd-$ETCD_VERSION" "" go.etcd.io/etcd/server/v3
# go names the binary of go.etcd.io/etcd/server/v3 "server".
[[ ! -x "$cache/etcd-$ETCD_VERSION/server" ]] || mv -f "$cache/etcd-$ETCD_VERSION/server" "$cache/etcd-$ETCD_VERSION/etcd"
build_set "$here/upstream/cri-tools" "$cache/cri-tools-$CRI_TOOLS_VERSION" \
    "-X sigs.k8s.io/cri-tools/pkg/version.Version=$CRI_TOOLS_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
toolkit="github.com/NVIDIA/nvidia-container-toolkit"
CGO=1 build_set "$here/upstream/nvidia-container-toolkit" "$cache/nvidia-container-toolkit-$TOOLKIT_VERSION" \
    "-X $toolkit/internal/info.version=${TOOLKIT_VERSION#v}" \
    "$toolkit/cmd/nvidia-ctk" "$toolkit/cmd/nvidia-container-runtime" "$toolkit/cmd/nvidia-cdi-hook"
# CGO: flannel's udp backend is C (its release builds use cgo too).
CGO=1 build_set "$here/upstream/flannel" "$cache/flannel-$FLANNEL_VERSION" \
    "-X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION" github.com/flannel-io/flannel
# go names the binary of the module's root package "flannel".
[[ ! -x "$cache/flannel-$FLANNEL_VERSION/flannel" ]] || mv -f "$cache/flannel-$FLANNEL_VERSION/flannel" "$cache/flannel-$FLANNEL_VERSION/flanneld"
if [[ $extras == *" containerd "* ]]; then
    # A containerd with CRI CDI support (on by default from 2.0), which Debian 12's 1.6 lacks.
    build_set "$here/upstream/containerd" "$cache/containerd-$CONTAINERD_VERSION" \
        "-X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
        github.com/containerd/containerd/v2/cmd/containerd \
        github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
        github.com/containerd/containerd/v2/cmd/ctr
fi

# kwok has no built-in behaviour: its "fast" stages (nodes become Ready and keep a lease, bound
# pods become Running, deleted pods go away) come from the same module, so they match the binary.
stages="$cache/kwok-$KWOK_VERSION/stages.yaml"
if [[ ! -s "$stages" || "$stages" -ot "$cache/kwok-$KWOK_VERSION/.stamp" ]]; then
    src="$(cd "$here/upstream/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage"
    for file in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
            pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        echo "---"
        cat "$src/$file"
    done >"$stages.tmp"
    mv -f "$stages.tmp" "$stages"
    echo ">> kwok stages written to $stages"
fi
