#!/usr/bin/env bash
# `make bundle`: the offline bundle of a kubeadm site, in one folder that preflight verifies and the
# roles install from with no network (docs/operations.md, air-gapped sites):
#   kubeadm/             kubeadm, kubelet, kubectl, cri-tools, flannel (built here from the pinned
#                        k8s.io/kubernetes, cri-tools and flannel), containerd, runc, the CNI plugins and
#                        their Debian dependencies
#   container-toolkit/   nvidia-container-toolkit-base (built here from NVIDIA's Go sources)
#   containerd-cdi/      containerd (built here from the pinned containerd module), whose CRI applies
#                        CDI devices: the kubeadm role installs it over Debian's 1.6 for
#                        vgpu_scheduling dra (docs/dra.md)
#   build-tools/         gcc, make, libc6-dev: the node builds libvgpu with them
#   python-client/       python3-cryptography (the extender's certificates); wheels/: the pinned
#                        Kubernetes client, its dependencies and pip for the Kubernetes modules'
#                        virtualenv on the control plane
#   images/              the component image; kube-apiserver, controller-manager, scheduler,
#                        kube-proxy, etcd and pause as kubeadm names them
#   site/wheels/         the controller's side: requirements-site.txt and pip as wheels for
#                        Debian 12's Python (the site virtualenv of `make site`), and the Ansible
#                        community wheel the dependency collections come from
#   SHA256SUMS
# The R470 driver packages are added with BUNDLE_PARTS="... driver" (Debian's contrib and non-free
# components must be in this machine's apt sources), K3s for K3s sites with BUNDLE_PARTS="... k3s"
# (its release downloads, checked against the release's sha256sum file; GitHub must be reachable). Sites that reach pkgs.k8s.io and
# registry.k8s.io can fill kubeadm/ and images/ from there instead (offline_bundle_downloads).
#
# Usage: files/bundle/build.sh [BUNDLE_DIR]   (default build/bundle)
# Everything built is cached (binaries by go.mod hash, images by their inputs, .deb files by the hash of their content),
# so a second run takes seconds and changes nothing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=/dev/null
source "$here/versions.env"
bundle=$(realpath -m "${1:-$root/build/bundle}")
parts_dir=$root/build/bundle-parts
parts=${BUNDLE_PARTS:-images kubeadm build_tools python_client local_files}
venv=${VENV:-$root/.venv}
export PATH="$venv/bin:$PATH"

log() { echo ">> $*"; }

started=$(date +%s)
log "Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, crictl $CRI_TOOLS_VERSION, NVIDIA toolkit $TOOLKIT_VERSION" \
    "(a cold build takes about 15 minutes on 2 cores)"
"$here/build-binaries.sh" containerd
"$here/package-debs.sh" "$parts_dir/debs"
"$here/build-images.sh" "$parts_dir/kubernetes-$K8S_VERSION.tar"
"$root/files/components/image/build.sh"

# The controller's wheels (make site on the air-gapped controller: files/site/venv.sh), for Debian
# 12's CPython 3.11 on x86_64, as the component image's; pip download only checks files already there.
log "the site virtualenv's wheels"
site_wheels=$parts_dir/site-wheels
mkdir -p "$site_wheels"
python3_target=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
"$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps "${python3_target[@]}" -d "$site_wheels" \
    -r "$root/requirements-site.txt" pip "$(sed -n 's/^ANSIBLE_COMMUNITY := //p' "$root/Makefile")"

# apt_download resolves against this machine's package lists.
if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages' -print -quit)" ]]; then
    apt-get update -qq
fi

local_files=$(
    cd "$parts_dir"
    {
        for deb in debs/*.deb; do
            case "$(basename "$deb")" in
                nvidia-container-toolkit*) dest=container-toolkit ;;
                containerd_*) dest=containerd-cdi ;;
                *) dest=kubeadm ;;
            esac
            printf '{"src": "%s/%s", "dest": "%s/%s"},' "$parts_dir" "$deb" "$dest" "$(basename "$deb")"
        done
        for wheel in site-wheels/*.whl; do
            printf '{"src": "%s/%s", "dest": "site/wheels/%s"},' "$parts_dir" "$wheel" "$(basename "$wheel")"
        done
        printf '{"src": "%s/kubernetes-%s.tar", "dest": "images/kubernetes-%s.tar"}' "$parts_dir" "$K8S_VERSION" "$K8S_VERSION"
    }
)
python3 - "$parts" "$local_files" "$root" >"$parts_dir/bundle-vars.json" <<'PY'
import json, sys
parts, files, root = sys.argv[1].split(), json.loads("[" + sys.argv[2] + "]"), sys.argv[3]
print(json.dumps({"offline_bundle_parts": parts, "offline_bundle_local_files": files,
                  "offline_bundle_source_dir": root}))
PY
ansible-playbook "$root/playbooks/bundle.yml" \
    -e "vgpu_offline_bundle_dir=$bundle" -e "@$parts_dir/bundle-vars.json"
log "offline bundle in $bundle ($(du -sh "$bundle" | cut -f1)) in $(($(date +%s) - started)) s"
