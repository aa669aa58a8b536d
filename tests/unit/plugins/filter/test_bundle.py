"""The offline bundle's completeness for one host (issue 14 item 8), as preflight checks it.

The listings are SHA256SUMS paths as `make bundle` writes them. K3s cannot be downloaded here
(docs/testing.md): its part of the bundle is checked at this level only.
"""

from pathlib import Path

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.filter import bundle
from ansible_collections.vgpu.isolation.plugins.filter.bundle import bundle_problems, sums_listing

ROOT = Path(__file__).resolve().parents[4]

KUBEADM = [
    "kubeadm/kubeadm_1.36.3-1_amd64.deb",
    "kubeadm/kubelet_1.36.3-1_amd64.deb",
    "kubeadm/kubectl_1.36.3-1_amd64.deb",
    "kubeadm/cri-tools_1.36.0-1_amd64.deb",
    "kubeadm/containerd_1.6.20~ds1-1+b1_amd64.deb",
    "kubeadm/runc_1.1.5+ds1-1+deb12u1_amd64.deb",
    "kubeadm/containernetworking-plugins_1.1.1+ds1-3+b5_amd64.deb",
    "kubeadm/flannel_0.28.10-1_amd64.deb",
    "images/kubernetes-v1.36.3.tar",
]
NODE = [
    "container-toolkit/nvidia-container-toolkit-base_1.20.2-1_amd64.deb",
    "build-tools/gcc_4%3a12.2.0-3_amd64.deb",
    "build-tools/make_4.3-4.1_amd64.deb",
    "build-tools/libc6-dev_2.36-9+deb12u13_amd64.deb",
    "python-client/python3-cryptography_38.0.4-3_amd64.deb",
    "python-client/wheels/pip-26.3-py3-none-any.whl",
    "python-client/wheels/kubernetes-37.0.2-py2.py3-none-any.whl",
    "images/vgpu-components-0.1.0.tar",
]
HOST = {
    "flavour": "kubeadm",
    "kubernetes_version": "1.36.3",
    "architecture": "x86_64",
    "os_family": "Debian",
    "gpu_node": True,
    "first_control_plane": True,
    "driver_method": "none",
    "has_compiler": False,
}


def test_the_bundle_make_bundle_writes_is_complete_for_a_kubeadm_node():
    assert bundle_problems(KUBEADM + NODE, HOST) == []


def test_each_missing_piece_is_named_with_its_folder_and_why():
    gone = ("kubelet", "kubernetes-v", "wheels/kubernetes")
    listing = [p for p in KUBEADM + NODE if not any(part in p for part in gone)]
    assert bundle_problems(listing, HOST) == [
        "offline bundle: kubeadm/ has no package for kubelet (kubeadm installs Kubernetes from it)",
        "offline bundle: images/kubernetes-v1.36.3.tar is missing (kubeadm imports its images from it)",
        "offline bundle: python-client/wheels/ has no wheel of kubernetes (the Kubernetes modules' virtualenv)",
    ]


def test_a_kubeadm_node_on_the_dra_path_needs_the_bundles_containerd_with_cdi():
    """vgpu_scheduling dra: Debian's containerd 1.6 in kubeadm/ ignores the claims' CDI devices."""
    dra = {**HOST, "scheduling": "dra"}
    assert bundle_problems(KUBEADM + NODE, dra) == [
        "offline bundle: containerd-cdi/ has no package for containerd (vgpu_scheduling dra: a containerd "
        "whose CRI applies the CDI devices of claims)"
    ]
    assert bundle_problems([*KUBEADM, *NODE, "containerd-cdi/containerd_2.4.2-0vgpu1_amd64.deb"], dra) == []
    assert bundle_problems(KUBEADM + NODE, {**dra, "flavour": "k3s", "roles": ("vgpu_stack",)}) == []


def test_a_node_with_a_compiler_needs_no_build_tools_and_a_worker_no_python_client():
    listing = [p for p in KUBEADM + NODE if not p.startswith(("build-tools/", "python-client/"))]
    assert bundle_problems(listing, {**HOST, "has_compiler": True, "first_control_plane": False}) == []


def test_k3s_needs_its_binary_and_images_for_the_architecture():
    k3s = {**HOST, "flavour": "k3s", "architecture": "aarch64"}
    assert bundle_problems(NODE, k3s) == [
        "offline bundle: k3s/k3s-arm64 is missing (the k3s role installs K3s from them)",
        "offline bundle: k3s/k3s-airgap-images-arm64.tar.zst is missing (the k3s role installs K3s from them)",
    ]
    amd = ["k3s/k3s", "k3s/k3s-airgap-images-amd64.tar.zst"]
    assert bundle_problems(NODE + amd, {**k3s, "architecture": "x86_64"}) == []


@pytest.mark.parametrize(
    ("method", "listing", "problem"),
    [
        ("offline", [], "offline bundle: driver/ has no .deb package (vgpu_driver_method offline)"),
        ("offline", ["driver/nvidia-tesla-470-driver_470.256.02-1~deb12u1_amd64.deb"], None),
        (
            "runfile",
            [],
            "offline bundle: driver/NVIDIA-Linux-x86_64-470.256.02.run is missing (vgpu_driver_method runfile)",
        ),
        ("none", [], None),
    ],
)
def test_the_driver_folder_is_needed_unless_the_driver_comes_from_elsewhere(method, listing, problem):
    host = {**HOST, "driver_method": method, "driver_version": "470.256.02"}
    assert bundle_problems(KUBEADM + NODE + listing, host) == ([problem] if problem else [])


def test_an_existing_cluster_needs_only_what_the_roles_asked_for_install():
    """stack.yml with the interposer alone: no kubeadm/, no container toolkit."""
    host = {**HOST, "roles": ["vgpu_interposer", "vgpu_stack"]}
    listing = [p for p in NODE if not p.startswith("container-toolkit/")]
    assert bundle_problems(listing, host) == []


def test_the_listing_comes_from_sha256sums():
    text = "ab12  kubeadm/kubelet_1.36.3-1_amd64.deb\ncd34 *images/kubernetes-v1.36.3.tar\n\n"
    assert sums_listing(text) == ["kubeadm/kubelet_1.36.3-1_amd64.deb", "images/kubernetes-v1.36.3.tar"]


# --- one truth: the roles install exactly what the check asks for --------------------------------
def test_the_lists_are_the_roles_own():
    kubeadm_task = yaml.safe_load((ROOT / "roles/kubeadm/tasks/packages_offline.yml").read_text())[0]
    kubeadm_vars = yaml.safe_load((ROOT / "roles/kubeadm/vars/main.yml").read_text())
    required = kubeadm_task["vars"]["vgpu_bundle_required"]
    for name in bundle.KUBEADM_PACKAGES:
        assert name in kubeadm_vars["kubeadm_packages"] or name in required
    offline = yaml.safe_load((ROOT / "roles/kubeadm/tasks/packages_offline.yml").read_text())
    cdi = next(t for t in offline if t.get("vars", {}).get("vgpu_bundle_folder") == "containerd-cdi")
    assert tuple(cdi["vars"]["vgpu_bundle_required"]) == bundle.CONTAINERD_CDI_PACKAGES
    interposer = yaml.safe_load((ROOT / "roles/vgpu_interposer/vars/main.yml").read_text())
    tools = interposer["__vgpu_interposer_default_build_packages"]
    assert {family: tuple(names) for family, names in tools.items()} == bundle.BUILD_TOOLS
    toolkit = (ROOT / "roles/nvidia_container_runtime/vars/main.yml").read_text()
    assert "['nvidia-container-toolkit-base']" in toolkit
    base = yaml.safe_load((ROOT / "roles/vgpu/vars/main.yml").read_text())
    assert tuple(base["vgpu_extender_tls_crypto_packages"]["Debian"]) == bundle.CRYPTO_PACKAGES
    k3s = yaml.safe_load((ROOT / "roles/k3s/vars/main.yml").read_text())
    assert k3s["k3s_arch_map"] == bundle.K3S_ARCH
