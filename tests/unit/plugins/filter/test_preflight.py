"""Preflight's rules about a node (plugins/filter/preflight.py): what the role's tasks saw, judged by
pure functions (tests/unit/roles/preflight runs the role itself)."""

import pytest
from ansible_collections.vgpu.isolation.plugins.filter.preflight import (
    FilterModule,
    gpu_sizes,
    mig_gpus,
    node_problems,
    unreachable_problem,
)

# A GPU node where everything is in place: online, with its GPU, its image tarball, no bundle.
FINE = {
    "require_gpu": True,
    "nvidia_pci_devices": 1,
    "nvidia_device_files": 0,
    "smi_rc": 0,
    "smi_lines": ["23028, Disabled"],
    "bundle_dir": "",
    "bundle_manifest": "SHA256SUMS",
    "bundle_exists": False,
    "bundle_check_rc": 0,
    "flavour": "k3s",
    "image_import": True,
    "image": "localhost/vgpu-components:0.1.0",
    "image_tarball": "/srv/vgpu-components-0.1.0.tar",
    "image_tarball_exists": True,
    "images_present": [],
    "mirror_url": "http://deb.debian.org/debian/dists/bookworm/Release",
    "mirror_status": 200,
    "driver_method": "auto",
}


def test_a_node_with_what_it_needs_has_no_problem():
    assert node_problems(FINE) == []


@pytest.mark.parametrize(
    ("seen", "fragment"),
    [
        ({"smi_lines": ["40960, Enabled", "40960, Disabled", "81920, Enabled"]}, "GPU 0, 2 has MIG mode enabled"),
        ({"nvidia_pci_devices": 0}, "no NVIDIA GPU found (no PCI device with vendor 0x10de, no /dev/nvidia<N>)"),
        ({"bundle_dir": "/srv/bundle"}, "vgpu_offline_bundle_dir: /srv/bundle has no SHA256SUMS on the controller"),
        (
            {"bundle_dir": "/srv/b", "bundle_exists": True, "bundle_check_rc": 1, "bundle_check_lines": ["a: FAILED"]},
            "files of /srv/b do not match SHA256SUMS (damaged or changed since the bundle was built): a: FAILED",
        ),
        ({"image_tarball_exists": False}, "component image: localhost/vgpu-components:0.1.0 is not in containerd"),
        ({"flavour": "kubeadm", "cni_manifest": "/srv/flannel.yml"}, "kubeadm_cni_manifest_src: /srv/flannel.yml"),
        ({"flavour": "kubeadm", "cni": "flannel"}, "kubeadm_cni: flannel runs flanneld from the offline bundle"),
        ({"mirror_status": -1, "mirror_msg": "timed out"}, "the package mirror http://deb.debian.org"),
        (
            {"mirror_status": 404, "bundle_dir": "/srv/b", "bundle_exists": True},
            "vgpu_driver_method auto installs the driver from the package mirror",
        ),
    ],
)
def test_each_rule_names_what_is_wrong_and_the_fix(seen, fragment):
    (problem,) = node_problems({**FINE, **seen})
    assert fragment in problem


@pytest.mark.parametrize(
    "seen",
    [
        {"smi_rc": 9, "smi_lines": ["40960, Enabled"]},  # nvidia-smi failed: its lines say nothing
        {"require_gpu": False, "nvidia_pci_devices": 0},  # a control-plane node
        {"nvidia_pci_devices": 0, "nvidia_device_files": 1},  # a loaded driver's device files count
        {"image_tarball_exists": False, "images_present": ["localhost/vgpu-components:0.1.0"]},
        {"image_tarball_exists": False, "image_import": False},  # the nodes pull it
        {"flavour": "kubeadm", "cni_manifest": "/srv/flannel.yml", "cni_manifest_exists": True},
        {"flavour": "kubeadm", "cni": "flannel", "kubeadm_bundle_dir": "/srv/b"},
    ],
)
def test_what_is_no_problem_is_not_reported(seen):
    assert node_problems({**FINE, **seen}) == []


def test_mig_mode_is_read_per_gpu_line():
    assert mig_gpus(["23028, Enabled", "23028", "23028, disabled", " 1, ENABLED "]) == [0, 3]


def test_the_plugin_exposes_the_filter():
    assert set(FilterModule().filters()) == {"node_problems", "unreachable_problem", "unjoined_problems", "gpu_sizes"}


# --- issue 41: GPU sizes before any driver, unreachable hosts ----------------------------------
def test_each_host_s_gpus_are_sized_by_nvidia_smi_then_the_inventory_then_the_pci_id():
    sizes = gpu_sizes(
        {
            "a": {"smi_rc": 0, "smi_lines": ["23028, Disabled"], "stated": ["80GiB"], "pci_ids": ["0x2236"]},
            "b": {"smi_rc": 1, "stated": ["24GiB"], "pci_ids": ["0x1eb8"]},
            "c": {"smi_rc": 127, "pci_ids": ["0x1eb8", "0x2001"]},
            "d": {},
        }
    )
    assert sizes["gpus"] == [
        ["a's GPU 0", 23028],
        ["b's GPU 0", 24576],
        ["c's GPU 0 (Tesla T4 by its PCI ID, 16384 MiB nominal)", 16384],
    ]
    (unknown,) = sizes["unknown"]
    assert unknown.startswith(
        "c: could not check vgpu_memory_unit_mib and vgpu_sample_app_quota against its GPU(s) 10de:2001"
    )
    assert unknown.endswith("state them in its host_vars (vgpu_gpu_memory_mib: [24GiB])")


def test_an_h200_and_an_l40s_are_sized_by_their_pci_ids():
    """The H200's ID as nvidia-smi reports it on the device machine (pci.device_id 0x233510DE,
    143771 MiB under driver 580); the L40S's from pci.ids."""
    sizes = gpu_sizes({"h": {"smi_rc": 127, "pci_ids": ["0x2335", "0x26b9"]}})
    assert sizes["gpus"] == [
        ["h's GPU 0 (H200 SXM 141GB by its PCI ID, 144384 MiB nominal)", 144384],
        ["h's GPU 1 (L40S by its PCI ID, 49152 MiB nominal)", 49152],
    ]
    assert sizes["unknown"] == []


def test_an_unreachable_host_s_problem_names_its_address_and_what_to_check():
    problem = unreachable_problem("Task failed: Failed to connect to the host via ssh: timed out", "192.0.2.21")
    assert problem.startswith("unreachable at 192.0.2.21: Failed to connect to the host via ssh: timed out; check")
