"""The driver plan per distribution: the distro logic that cannot converge on the Debian test machine.

Debian 12 is also converged for real by the molecule scenario nvidia_driver; Ubuntu and RHEL are only
checked here (the support matrix, module_utils/platforms.py, says "unit" for them).
"""

import fnmatch
from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.module_utils import nvidia_driver as nd

KERNEL = "6.1.0-41-amd64"


def plan(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "distro_id": "debian",
        "major": "12",
        "kernel": KERNEL,
        "branch": "470",
        "version": "470.256.02",
        "policy": "exact",
        "method": "auto",
        "installed": None,
    }
    args.update(overrides)
    return nd.plan(**args)


def test_debian_installs_the_tesla_470_packages_from_non_free_pinned_and_held():
    p = plan()
    assert p["method"] == "distro"
    assert p["manager"] == "apt"
    assert "nvidia-tesla-470-driver=470.256.02-*" in p["install_specs"]
    assert "nvidia-tesla-470-kernel-dkms=470.256.02-*" in p["install_specs"]
    assert p["hold_command"][:2] == ["apt-mark", "hold"]
    assert "nvidia-tesla-470-smi" in p["hold_packages"]
    assert p["apt_components"] == ["contrib", "non-free", "non-free-firmware"]
    assert p["headers_package"] == f"linux-headers-{KERNEL}"
    assert p["initramfs_command"] == ["update-initramfs", "-u"]


def test_the_debian_revision_matches_the_pin():
    # bookworm non-free offers 470.256.02-1~deb12u1: apt's glob and the apt preferences pin accept it.
    assert fnmatch.fnmatch("470.256.02-1~deb12u1", plan()["version_glob"])
    assert not fnmatch.fnmatch("470.239.06-1", plan()["version_glob"])
    assert "Pin: version 470.256.02-*" in nd.apt_preferences(["nvidia-tesla-470-driver"], "470.256.02")


@pytest.mark.parametrize(("server", "suffix"), [(True, "-server"), (False, "")])
def test_ubuntu_uses_canonicals_470_packages(server, suffix):
    p = plan(distro_id="ubuntu", major="22", ubuntu_server=server)
    assert p["method"] == "distro"
    assert p["packages"] == [f"nvidia-driver-470{suffix}", f"nvidia-utils-470{suffix}"]
    assert f"nvidia-driver-470{suffix}=470.256.02-*" in p["install_specs"]
    assert p["apt_components"] == ["restricted"]


def test_ubuntu_from_nvidias_repository_uses_the_branch_metapackage_not_the_floating_one():
    p = plan(distro_id="ubuntu", major="22", method="nvidia_repo", branch="535", version="535.216.03")
    assert p["packages"] == ["cuda-drivers-535"]
    assert p["cuda_repo_url"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"


@pytest.mark.parametrize("distro", ["rhel", "rocky", "almalinux"])
def test_el9_uses_the_dkms_module_stream_of_an_lts_branch_and_versionlock(distro):
    p = plan(distro_id=distro, major="9", branch="535", version="535.216.03")
    assert p["method"] == "nvidia_repo"
    assert p["manager"] == "dnf"
    assert p["install_specs"] == ["@nvidia-driver:535-dkms"]
    assert p["hold_command"][:3] == ["dnf", "versionlock", "add"]
    assert p["cuda_repo_url"].endswith("/repos/rhel9/x86_64/")
    assert p["headers_package"] == f"kernel-devel-{KERNEL}"
    assert p["initramfs_command"] == ["dracut", "-f"]


def test_debian_12_packages_the_535_lts_branch_with_its_firmware_component():
    p = plan(branch="535", version="535.216.03")
    assert "nvidia-tesla-535-driver=535.216.03-*" in p["install_specs"]
    assert "non-free-firmware" in p["apt_components"]  # firmware-nvidia-tesla-535-gsp lives there


def test_the_580_lts_branch_comes_from_nvidias_repository_on_debian_12():
    with pytest.raises(nd.PlanError, match="branch 580 is not packaged by the distribution for Debian 12"):
        plan(branch="580", version="580.95.05")
    p = plan(branch="580", version="580.95.05", method="nvidia_repo")
    assert p["packages"] == ["cuda-drivers-580"]


def test_runfile_is_silent_and_registers_with_dkms():
    p = plan(method="runfile")
    assert p["packages"] == []
    assert {"--silent", "--dkms", "--disable-nouveau"} <= set(p["runfile_args"])


def test_minimum_policy_keeps_a_newer_driver():
    p = plan(policy="minimum", installed="580.95.05")
    assert p["action"] == "none"
    assert not p["drift"]
    assert "580.95.05 satisfies" in p["reason"]


def test_minimum_policy_keeps_a_newer_driver_even_where_it_could_not_install_one():
    # e.g. the GPU host runs Rocky 9 with 580: no R470 package exists there, and none is needed.
    p = plan(distro_id="rocky", major="9", policy="minimum", installed="580.95.05")
    assert p["action"] == "none"
    assert p["packages"] == []
    assert "branch 470 is not packaged by NVIDIA's CUDA repository for RHEL 9" in p["reason"]
    with pytest.raises(nd.PlanError, match="it offers: 535, 580"):
        plan(distro_id="rocky", major="9", policy="minimum", installed="460.106.00")


def test_minimum_policy_replaces_an_older_branch():
    p = plan(policy="minimum", installed="460.106.00")
    assert p["action"] == "install"
    assert p["drift"]


def test_exact_policy_treats_any_other_version_as_drift():
    assert plan(installed="470.256.02")["action"] == "none"
    drifted = plan(installed="470.239.06")
    assert drifted["action"] == "install"
    assert drifted["drift"]
    assert "470.239.06 is installed but 470.256.02 is pinned" in drifted["reason"]
    assert plan(installed="535.183.01")["drift"]


def test_a_node_without_a_driver_gets_one_under_either_policy():
    for policy in ("exact", "minimum"):
        assert plan(policy=policy)["action"] == "install"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"distro_id": "arch"}, "distribution 'arch' is not supported"),
        ({"version": "535.183.01"}, "not in branch '470'"),
        ({"policy": "latest"}, "policy 'latest'"),
        ({"method": "snap"}, "method 'snap'"),
        ({"distro_id": "ubuntu", "major": "24", "method": "nvidia_repo"}, "not packaged by NVIDIA's CUDA repository"),
        ({"distro_id": "centos", "major": "7"}, "centos 7 is not supported"),
    ],
)
def test_bad_requests_name_the_bad_value(overrides, message):
    with pytest.raises(nd.PlanError, match=message):
        plan(**overrides)
