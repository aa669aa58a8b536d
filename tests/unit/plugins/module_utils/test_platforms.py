"""The support matrix (issue 14 item 3): one statement, used by preflight, the driver plan and the docs.

The GPU and driver facts are inputs (no GPU here); the decisions are the real code.
"""

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.filter.platform import platform_problems
from ansible_collections.vgpu.isolation.plugins.module_utils import nvidia_driver, platforms
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import SETTINGS

ROOT = Path(__file__).resolve().parents[4]
H200, B200, L40S, A100, T4 = "0x2335", "0x2901", "0x26b9", "0x20b2", "0x1eb8"


def node(distro="debian", major="12", arch="x86_64", gpus=(), installed=None):
    return {
        "distribution": {"id": distro, "major": major},
        "architecture": arch,
        "gpu_device_ids": list(gpus),
        "driver_installed_version": installed,
    }


def test_the_documented_table_is_the_matrix():
    text = (ROOT / "docs" / "platforms.md").read_text()
    assert platforms.docs_table() in text, "regenerate the table of docs/platforms.md from platforms.docs_table()"
    assert platforms.gpu_docs_table() in text, "regenerate the GPU table of docs/platforms.md (gpu_docs_table)"


def test_every_role_claims_the_platforms_of_the_matrix():
    """galaxy_info.platforms of each role names exactly the matrix's distributions and releases."""
    expected = {"Debian": {"bookworm", "bullseye"}, "Ubuntu": {"jammy", "noble"}, "EL": {"9"}}
    assert {p["name"] for p in platforms.PLATFORMS.values()} == {
        "Debian 12",
        "Debian 11",
        "Ubuntu 22.04",
        "Ubuntu 24.04",
        "RHEL 9 (and Rocky, AlmaLinux)",
    }
    for meta in sorted((ROOT / "roles").glob("*/meta/main.yml")):
        claimed = yaml.safe_load(meta.read_text())["galaxy_info"].get("platforms") or []
        got = {p["name"]: {str(v) for v in p["versions"]} for p in claimed}
        assert got == expected, f"{meta}: {got}"


def test_a_debian_12_node_with_r470_and_a_t4_is_supported():
    assert platform_problems(node(gpus=[T4]), "470") == []


@pytest.mark.parametrize(
    ("gpu", "needed", "generation"),
    [(H200, "525", "Hopper"), (B200, "570", "Blackwell"), (L40S, "525", "Ada Lovelace")],
)
def test_a_gpu_newer_than_the_branch_fails_in_preflight_naming_the_minimum_branch(gpu, needed, generation):
    (problem,) = platform_problems(node(gpus=[gpu]), "470")
    assert f"needs driver branch {needed} or newer" in problem and generation in problem
    assert "vgpu_driver_branch is 470" in problem


def test_the_advice_names_an_offered_branch():
    (problem,) = platform_problems(node(gpus=[H200]), "470")
    assert "set vgpu_driver_branch to 535" in problem  # 525 is not offered; 535 LTS is
    assert platform_problems(node(gpus=[H200, A100]), "535") == []
    (blackwell,) = platform_problems(node(gpus=[B200]), "535")
    assert "set vgpu_driver_branch to 580" in blackwell


def test_the_problem_names_the_gpu_and_every_offered_branch_that_supports_it():
    """Issue 14 item 4: the user sees which GPU it is and what to choose from, not one branch only."""
    (hopper,) = platform_problems(node(gpus=[H200]), "470")
    assert "GPU 10de:2335 (Hopper (H100, H200" in hopper
    assert "the offered branches that support it: 535, 580" in hopper
    (blackwell,) = platform_problems(node(gpus=[B200]), "535")
    assert "the offered branches that support it: 580" in blackwell


def test_an_unknown_newer_gpu_needs_the_newest_branch():
    assert platforms.minimum_branch(0x3182) == ("580", "newer than Blackwell")


def test_aarch64_is_refused_because_libvgpu_is_x86_64_only():
    (problem,) = platform_problems(node(arch="aarch64"), "470")
    assert problem.startswith("architecture aarch64 is not supported")


@pytest.mark.parametrize(("distro", "major"), [("centos", "7"), ("rhel", "8"), ("ubuntu", "20"), ("arch", "")])
def test_releases_outside_the_matrix_are_refused_with_the_list(distro, major):
    (problem,) = platform_problems(node(distro=distro, major=major), "")
    assert problem.startswith(f"{distro} {major} is not supported; supported: Debian 12, Debian 11")


def test_el9_gets_no_r470_and_says_which_branches_it_has():
    (problem,) = platform_problems(node(distro="rocky", major="9"), "470")
    assert problem.startswith("driver branch 470 is not packaged by NVIDIA's CUDA repository for RHEL 9")
    assert "it offers: 535, 580" in problem
    assert platform_problems(node(distro="rocky", major="9"), "535") == []


def test_under_minimum_an_adequate_driver_needs_no_package():
    assert platform_problems(node(distro="rocky", major="9", installed="580.95.05"), "470", policy="minimum") == []


def test_a_node_without_a_driver_request_is_checked_for_its_platform_only():
    assert platform_problems(node(gpus=[B200]), "") == []


def test_the_plan_and_preflight_agree_on_every_platform_branch_and_method():
    """What preflight accepts, the plan can install; what preflight refuses, the plan refuses too."""
    for (distro, major), _platform in platforms.PLATFORMS.items():
        for branch, info in platforms.BRANCHES.items():
            for method in ("distro", "nvidia_repo", "runfile"):
                refused = platform_problems(node(distro=distro, major=major), branch, method)
                try:
                    nvidia_driver.plan(
                        distro_id=distro,
                        major=major,
                        kernel="k",
                        branch=branch,
                        version=info["version"],
                        method=method,
                    )
                    planned = True
                except nvidia_driver.PlanError:
                    planned = False
                assert planned == (not refused), (distro, major, branch, method, refused)


def test_the_offered_branches_match_the_settings_defaults():
    defaults = {name: entry["default"] for name, entry in SETTINGS.items()}  # the contract's, literal
    default = platforms.BRANCHES[defaults["vgpu_driver_branch"]]
    assert (default["version"], default["cuda"]) == (defaults["vgpu_driver_version"], defaults["vgpu_cuda_version"])
    assert re.match(r"^\d+$", defaults["vgpu_driver_branch"])


# --- the DRA path's container runtime (docs/dra.md "The container runtime: CDI") ---------------
# `containerd --version` as each one prints it.
DEBIAN_12 = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3"
DOCKER_17 = "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da"
BUILT_24 = "containerd github.com/containerd/containerd/v2 v2.4.2 "


def test_debian_12s_containerd_is_refused_for_claims_with_the_reason_and_the_way_out():
    problem = platforms.cdi_runtime_problem(DEBIAN_12)
    assert "1.6.20" in problem and "CDI" in problem
    assert "1.7" in problem and "vgpu_scheduling: extender" in problem


def test_containerd_2_applies_cdi_devices_as_it_comes():
    assert platforms.cdi_runtime_problem(BUILT_24) == ""


def test_containerd_1_7_needs_cdi_switched_on_in_its_configuration():
    off = "[plugins.'io.containerd.grpc.v1.cri']\n    enable_cdi = false\n"
    on = "[plugins.'io.containerd.grpc.v1.cri']\n    enable_cdi = true\n"
    assert "enable_cdi" in platforms.cdi_runtime_problem(DOCKER_17, off)
    assert platforms.cdi_runtime_problem(DOCKER_17, on) == ""


@pytest.mark.parametrize(
    ("version", "merges"),
    [
        (DEBIAN_12, False),
        (DOCKER_17, False),
        ("containerd github.com/containerd/containerd/v2 v2.0.5 8a4b5d1", False),
        ("containerd github.com/containerd/containerd/v2 v2.1.0 1a2b3c4", True),
        (BUILT_24, True),
        ("something else", False),
    ],
)
def test_only_containerd_2_1_and_later_takes_the_nvidia_runtime_from_a_drop_in(version, merges):
    assert platforms.containerd_merges_drop_ins(version) is merges


def test_a_version_it_cannot_read_is_named_not_guessed():
    problem = platforms.cdi_runtime_problem("something else")
    assert "something else" in problem
