#!/usr/bin/env bash
# Builds the carry folders of the GPU kubelet test (run.sh) and prints the device calls that run it:
#   tests/gpu/kubelet/pack.sh            (in the checkout from which the calls are made)
# The GPU host has no package mirror and a call carries at most 64 MiB, the working tree included,
# so everything run.sh needs travels as xz-compressed pieces, grouped into one folder per call
# (<checkout>/.gpu-kubelet-N, ignored through .git/info/exclude):
#   k8s.tar.xz     kube-apiserver, -controller-manager, -scheduler, kubelet and kubectl v1.36.3 as one
#                  executable (multicall/main.go; the five separately would take one more call)
#   bin.tar.xz     etcd, NVIDIA's toolkit (nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook),
#                  from files/bundle/build-binaries.sh; Debian 12's containerd, containerd-shim-runc-v2,
#                  ctr, runc and the CNI plugins bridge, host-local and loopback (their .deb files)
#   image.tar.xz   the component image as `make image` wrote it, its layer as plain tar (oci_archive.py
#                  uncompressed_copy: xz shrinks it to 41 MiB, the gzipped layer stays 64; checked by sha256 on
#                  the host), and the pause image
#   python.tar.xz  ansible-core, the Kubernetes Python client and cryptography for the GPU host's
#                  Python (VGPU_KUBELET_PYTHON, default 3.12), and the community.crypto and
#                  kubernetes.core collections
# Pieces are cached in $VGPU_CACHE_DIR/gpu-kubelet by what went into them. Needs `make image` (or
# VGPU_KUBELET_IMAGE_TAR), `make collection` and Docker (the pause image).
# Environment: VGPU_KUBELET_CARRY (folder prefix, default <checkout>/.gpu-kubelet),
#   VGPU_KUBELET_CALL_MIB (what one call may carry with the tree, default 58),
#   VGPU_KUBELET_SCENARIO: reference (default); multi (the calls of the two-GPU reference, on
#   nvidia-h200-x2); dra (the DRA path, run.sh's dra.sh: adds containerd.tar.xz, containerd
#   $CONTAINERD_VERSION built by build-binaries.sh, whose CRI applies CDI devices); bench (the
#   scheduling bench, bench.sh: k8s.tar.xz and bench.tar.xz only: kwok and its stages, etcd, and the
#   Python libraries of bench/scheduling_throughput.py and the extender); mps (the reference's
#   pieces, run.sh's mps.sh: the stack with MPS on the node).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
# shellcheck source=/dev/null
source "$ROOT/files/bundle/versions.env"
CACHE=${VGPU_CACHE_DIR:-$HOME/.cache/vgpu-isolation}
PACK=$CACHE/gpu-kubelet
PYTHON_VERSION=${VGPU_KUBELET_PYTHON:-3.12}
IMAGE_TAR=${VGPU_KUBELET_IMAGE_TAR:-$ROOT/build/images/vgpu-components-0.1.0.tar}
CARRY=${VGPU_KUBELET_CARRY:-$ROOT/.gpu-kubelet}
LIMIT_MIB=${VGPU_KUBELET_CALL_MIB:-58}
PY=$ROOT/.venv/bin/python
SCENARIO=${VGPU_KUBELET_SCENARIO:-reference}
[[ $SCENARIO =~ ^(reference|multi|dra|bench|mps)$ ]] || { echo "VGPU_KUBELET_SCENARIO=$SCENARIO: expected reference, multi, dra, bench or mps" >&2; exit 2; }
# Debian 12's packages (bookworm and its security updates), as the offline bundle has them.
DEBS="containerd=1.6.20~ds1-1+deb12u3 runc=1.1.5+ds1-1+deb12u1 containernetworking-plugins=1.1.1+ds1-3+b5"
# What ansible-core, kubernetes.core's modules and community.crypto need that the
# GPU host's Python lacks (it has Jinja2, PyYAML, packaging, requests, urllib3, certifi, six and
# python-dateutil). The Kubernetes client 35 is the last without pydantic and aiohttp.
# The bench's (bench/scheduling_throughput.py, the extender, pki.py; with their dependencies), as the
# repository's virtualenv has them, and py-spy (bench/profile_extender_gil.sh; bin/py-spy).
BENCH_WHEELS="kubernetes==37.0.2 prometheus_client==0.26.0 PyYAML==6.0.4 grpcio==1.85.3 grpcio-tools==1.85.1 protobuf==7.36.2
    cryptography==50.0.2 nvidia-ml-py==13.615.71 py-spy==0.4.3"
WHEELS="ansible-core==2.19.14 resolvelib==1.2.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
    kubernetes==35.0.0 websocket-client==1.9.2 requests-oauthlib==2.0.0 oauthlib==4.0.1 durationpy==0.11"
mkdir -p "$PACK"
log() { echo ">> $*" >&2; }
die() { echo "!! $*" >&2; exit 1; }
hash_of() { sha256sum | cut -c1-16; }
mib() { echo $((($(stat -c %s "$1") + 1048575) / 1048576)); }

# xz_piece <name> <key> <dir>: $PACK/<name>-<key>.tar.xz of the folder's content, made once per key.
xz_piece() {
    local out=$PACK/$1-$2.tar.xz
    if [[ ! -s $out ]]; then
        log "compressing $1 (xz -9; minutes on a busy machine)"
        tar -C "$3" --numeric-owner --owner=0 --group=0 --sort=name -c . | nice -n 10 xz -9 -T2 --block-size=96MiB >"$out.tmp"
        mv "$out.tmp" "$out"
    fi
    echo "$out"
}

# ---------------------------------------------------------------------------------- the inputs
[[ -x $PY ]] || die "$PY is missing: run 'make venv' first"
[[ $SCENARIO == bench || -s $IMAGE_TAR ]] || die "$IMAGE_TAR is missing: run 'make image' (or set VGPU_KUBELET_IMAGE_TAR)"
crypto=$ROOT/.collections/ansible_collections/community/crypto
[[ -f $crypto/MANIFEST.json ]] || die "$crypto is missing: run 'make collection' first"
k8s_core=$ROOT/.collections/ansible_collections/kubernetes/core
[[ -f $k8s_core/MANIFEST.json ]] || die "$k8s_core is missing: run 'make collection' first"
extras=()
[[ $SCENARIO != dra ]] || extras=(containerd)
"$ROOT/files/bundle/build-binaries.sh" "${extras[@]}" >/dev/null

# The multi-call executable, from the same pinned go.mod as the five upstream binaries.
minor=${K8S_VERSION#v*.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
module=$ROOT/files/bundle/upstream/kubernetes
mc_key=$(cat "$module/go.mod" "$module/go.sum" "$HERE/multicall/main.go" <(echo "$ldflags $(go env GOVERSION)") | hash_of)
multicall=$PACK/k8s-multicall-$mc_key
if [[ ! -x $multicall ]]; then
    log "building the multi-call kube-apiserver/-controller-manager/-scheduler/kubelet/kubectl"
    build=$(mktemp -d)
    cp "$module/go.mod" "$module/go.sum" "$build/"
    cp "$HERE/multicall/main.go" "$build/"
    (cd "$build" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags="$ldflags" -o "$multicall.tmp" .)
    rm -rf "$build"
    mv "$multicall.tmp" "$multicall"
fi

debs=$CACHE/debs-gpu-kubelet
mkdir -p "$debs"
for pin in $DEBS; do
    name=${pin%%=*} version=${pin#*=}
    compgen -G "$debs/${name}_${version//:/%3a}_amd64.deb" >/dev/null \
        || (cd "$debs" && apt-get download -q "$pin" >/dev/null 2>&1) || die "apt-get download $pin failed"
done

pause=$PACK/pause-$PAUSE_VERSION.tar
if [[ ! -s $pause ]]; then
    docker image inspect "registry.k8s.io/pause:$PAUSE_VERSION" >/dev/null 2>&1 \
        || "$ROOT/files/bundle/build-images.sh" "$PACK/kubernetes-images.tar"
    docker save -o "$pause" "registry.k8s.io/pause:$PAUSE_VERSION"
fi

# ------------------------------------------------------------------------------------ the pieces
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pieces=()

mkdir -p "$stage/k8s/k8s"
ln "$multicall" "$stage/k8s/k8s/k8s-multicall" 2>/dev/null || cp "$multicall" "$stage/k8s/k8s/k8s-multicall"
pieces+=("$(xz_piece k8s "$mc_key" "$stage/k8s")")

if [[ $SCENARIO == bench ]]; then
    # Where tests/k8s/scripts/lib.sh looks under VGPU_CACHE_DIR=<payload>/cache.
    kwok=$CACHE/k8s/kwok-$KWOK_VERSION
    mkdir -p "$stage/bench/cache/k8s/kwok-$KWOK_VERSION" "$stage/bench/cache/k8s/etcd-$ETCD_VERSION"
    cp "$kwok/kwok" "$kwok/stages.yaml" "$stage/bench/cache/k8s/kwok-$KWOK_VERSION/"
    cp "$CACHE/k8s/etcd-$ETCD_VERSION/etcd" "$stage/bench/cache/k8s/etcd-$ETCD_VERSION/"
    # shellcheck disable=SC2086 # one argument per pinned wheel
    "$PY" -m pip install --quiet --no-compile --only-binary=:all: --target "$stage/bench/bench-site" \
        --python-version "$PYTHON_VERSION" --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any $BENCH_WHEELS
    find "$stage/bench" -name __pycache__ -prune -exec rm -rf {} +
    bench_key=$(cd "$stage/bench" && find . -type f -exec sha256sum {} + | sort | hash_of)
    pieces+=("$(xz_piece bench "$bench_key" "$stage/bench")")
else
    if [[ $SCENARIO == dra ]]; then
        mkdir -p "$stage/containerd/containerd2"
        cp "$CACHE/k8s/containerd-$CONTAINERD_VERSION"/{containerd,containerd-shim-runc-v2,ctr} "$stage/containerd/containerd2/"
        containerd_key=$(cd "$stage/containerd" && find . -type f -exec sha256sum {} + | sort | hash_of)
        pieces+=("$(xz_piece containerd "$containerd_key" "$stage/containerd")")
    fi

    mkdir -p "$stage/bin/bin" "$stage/bin/cni" "$stage/debs"
    for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$stage/debs"; done
    cp "$stage"/debs/usr/bin/{containerd,containerd-shim-runc-v2,ctr} "$stage/debs/usr/sbin/runc" "$stage/bin/bin/"
    cp "$stage"/debs/usr/lib/cni/{bridge,host-local,loopback} "$stage/bin/cni/"
    cp "$CACHE/k8s/etcd-$ETCD_VERSION/etcd" "$CACHE/k8s/nvidia-container-toolkit-$TOOLKIT_VERSION"/nvidia-{ctk,container-runtime,cdi-hook} \
        "$stage/bin/bin/"
    # All are stripped already: Go's -s -w here, dh_strip in Debian's packages.
    bin_key=$(cd "$stage/bin" && find . -type f -exec sha256sum {} + | sort | hash_of)
    pieces+=("$(xz_piece bin "$bin_key" "$stage/bin")")

    mkdir -p "$stage/image/images"
    # The same image with its layer as plain tar: xz takes the piece to about 41 MiB, where the
    # archive's gzipped layer stays 64 MiB, more than one call carries.
    "$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import oci_archive; oci_archive.uncompressed_copy(*map(__import__("pathlib").Path, sys.argv[2:]))' \
        "$ROOT/files/components/image" "$IMAGE_TAR" "$stage/image/images/vgpu-components-0.1.0.tar"
    cp "$pause" "$stage/image/images/pause.tar"
    (cd "$stage/image/images" && sha256sum vgpu-components-0.1.0.tar >SHA256SUMS)
    image_key=$(cat "$stage/image/images/SHA256SUMS" <(sha256sum <"$pause") | hash_of)
    pieces+=("$(xz_piece image "$image_key" "$stage/image")")

    py_key=$(echo "$PYTHON_VERSION $WHEELS $(cat "$crypto/MANIFEST.json" "$k8s_core/MANIFEST.json" | sha256sum)" | hash_of)
    if [[ ! -s $PACK/python-$py_key.tar.xz ]]; then
        log "the Python libraries for CPython $PYTHON_VERSION"
        # shellcheck disable=SC2086 # one argument per pinned wheel
        "$PY" -m pip install --quiet --no-deps --no-compile --only-binary=:all: --target "$stage/python/site" \
            --python-version "$PYTHON_VERSION" --implementation cp --platform manylinux_2_28_x86_64 \
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any $WHEELS
        # Not needed to run playbooks: ansible-core's test tool.
        rm -rf "$stage/python/site/ansible_test"
        mkdir -p "$stage/python/collections/ansible_collections/community"
        cp -a "$crypto" "$stage/python/collections/ansible_collections/community/"
        mkdir -p "$stage/python/collections/ansible_collections/kubernetes"
        cp -a "$k8s_core" "$stage/python/collections/ansible_collections/kubernetes/"
        # Not needed to run playbooks: kubernetes.core's own tests and docs.
        rm -rf "$stage/python/collections/ansible_collections/kubernetes/core/"{tests,docs}
        find "$stage/python" -name __pycache__ -prune -exec rm -rf {} +
    fi
    pieces+=("$(xz_piece python "$py_key" "$stage/python")")
fi

# ------------------------------------------------------------------------- pieces into calls
tree_mib=$(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null \
    | awk '{s += $1} END {printf "%d", s / 1048576 + 1}')
room=$((LIMIT_MIB - tree_mib))
log "working tree: $tree_mib MiB; each call carries at most $room MiB of pieces"
# First fit, largest piece first.
mapfile -t sorted < <(for p in "${pieces[@]}"; do echo "$(stat -c %s "$p") $p"; done | sort -rn | cut -d' ' -f2)
parts=()
sizes=()
for piece in "${sorted[@]}"; do
    size=$(mib "$piece")
    ((size <= room)) || die "$(basename "$piece") is $size MiB, more than one call carries ($room MiB)"
    placed=0
    for i in "${!parts[@]}"; do
        if ((sizes[i] + size <= room)); then
            parts[i]+=" $piece"
            sizes[i]=$((sizes[i] + size))
            placed=1
            break
        fi
    done
    ((placed)) || { parts+=("$piece"); sizes+=("$size"); }
done

rm -rf "$CARRY"-[0-9]*
exclude=$(cd "$ROOT" && git rev-parse --git-path info/exclude)
[[ $exclude == /* ]] || exclude=$ROOT/$exclude
for i in "${!parts[@]}"; do
    dir=$CARRY-$((i + 1))
    mkdir -p "$dir"
    for piece in ${parts[i]}; do
        name=$(basename "$piece" | sed -E 's/-[0-9a-f]{16}\.tar\.xz$/.tar.xz/')
        ln "$piece" "$dir/$name" 2>/dev/null || cp "$piece" "$dir/$name"
    done
    (cd "$dir" && sha256sum ./*.tar.xz >SHA256SUMS)
    if [[ $(dirname "$dir") == "$ROOT" ]]; then
        mkdir -p "$(dirname "$exclude")"
        grep -qxF "/$(basename "$dir")/" "$exclude" 2>/dev/null || echo "/$(basename "$dir")/" >>"$exclude"
    fi
    log "$(basename "$dir"): $(du -m --apparent-size "$dir" | cut -f1) MiB + the tree ($tree_mib MiB): $(cd "$dir" && echo ./*.tar.xz)"
done

# ------------------------------------------------------------------------------- the calls
# multi: on two GPUs; bench: bench.sh instead of run.sh.
count=${#parts[@]}
kind="" scenario="" script=tests/gpu/kubelet/run.sh
case $SCENARIO in
    multi) kind='kind="nvidia-h200-x2", ' scenario="VGPU_KUBELET_SCENARIO=multi " ;;
    dra) scenario="VGPU_KUBELET_SCENARIO=dra " ;;
    mps) scenario="VGPU_KUBELET_SCENARIO=mps " ;;
    bench) script=tests/gpu/kubelet/bench.sh ;;
esac
echo
echo "The device calls, one right after the other (a machine stays warm 30 s after a call):"
for i in $(seq 1 "$count"); do
    name=$(basename "$CARRY")-$i
    if ((i < count)); then
        echo "  $i. run(${kind}carry=[\"$name\"], timeout_s=300, command=\"tests/gpu/kubelet/unpack.sh $name\")"
    else
        echo "  $i. run(${kind}carry=[\"$name\"], timeout_s=600, command=\"tests/gpu/kubelet/unpack.sh $name && ${scenario}$script\")"
    fi
done
