#!/usr/bin/env bash
# Build the pinned upstream binaries into the cache, or reuse them when the cache already holds
# a build of the same go.mod/go.sum with the same Go toolchain.
#   $CACHE/k8s/<K8S_VERSION>/{kube-apiserver,kube-controller-manager,kube-scheduler}
#   $CACHE/k8s/kwok-<KWOK_VERSION>/kwok
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=/dev/null
source "$here/versions.env"
cache="${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}/k8s"

# build_set <module dir> <output dir> <package>...
build_set() {
    local module="$1" out="$2"; shift 2
    local stamp key
    stamp="$out/.stamp"
    key="$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -c1-16) $(go env GOVERSION)"
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
    if ! (cd "$module" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags='-s -w' -o "$tmp/" "$@") \
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

command -v go >/dev/null || { echo "!! go is not on PATH (Go >= 1.26 is needed to build Kubernetes $K8S_VERSION)" >&2; exit 1; }
build_set "$here/upstream/kubernetes" "$cache/$K8S_VERSION" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler
build_set "$here/upstream/kwok" "$cache/kwok-$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
