# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The support matrix: the one statement of what the collection provisions, and what tests it.

preflight checks nodes against it, the driver plan (nvidia_driver.py) takes its repository folders
and branches from it, and the table of docs/platforms.md is rendered from it (a unit test keeps them
equal). Each claim names what tests it: ``molecule`` (converged in a Debian 12 container by a
scenario) or ``unit`` (the install plan is unit-tested; NVIDIA's repositories cannot be reached from
the test machines).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

# libvgpu builds for x86-64 only (files/libvgpu/Makefile), and the component image is x86-64.
ARCHITECTURES = ("x86_64",)

# Driver branches the collection offers: R470 stays the default (CUDA 11.4, what our users run);
# 535 and 580 are NVIDIA's long-term-support branches.
BRANCHES: Dict[str, Dict[str, str]] = {
    "470": {"cuda": "11.4", "version": "470.256.02"},
    "535": {"cuda": "12.2", "version": "535.216.03"},
    "580": {"cuda": "13.0", "version": "580.95.05"},
}

# (os-release ID, major version) -> what the collection does there.
#   distro_branches: branches the distribution packages itself (method distro, and offline).
#   repo_folder / repo_branches: NVIDIA's CUDA repository folder and the branches it carries
#     (method nvidia_repo); each folder starts at the CUDA release of its distribution.
#   tested: what tests the claim: molecule (converged for real) or unit (the install plan only).
PLATFORMS: Dict[Tuple[str, str], Dict[str, Any]] = {
    ("debian", "12"): {
        "name": "Debian 12",
        "distro_branches": ("470", "535"),  # bookworm non-free: nvidia-tesla-470, nvidia-tesla-535
        "repo_folder": "debian12",
        "repo_branches": ("535", "580"),
        "tested": "molecule (470 from the distribution, converged); unit (the other plans)",
    },
    ("debian", "11"): {
        "name": "Debian 11",
        "distro_branches": ("470",),
        "repo_folder": "debian11",
        "repo_branches": ("535",),
        "tested": "unit",
    },
    ("ubuntu", "22"): {
        "name": "Ubuntu 22.04",
        "distro_branches": ("470", "535", "580"),  # restricted: nvidia-driver-<branch>-server
        "repo_folder": "ubuntu2204",
        "repo_branches": ("535", "580"),
        "tested": "unit",
    },
    ("ubuntu", "24"): {
        "name": "Ubuntu 24.04",
        "distro_branches": ("535", "580"),
        "repo_folder": "ubuntu2404",
        "repo_branches": ("580",),
        "tested": "unit",
    },
    ("rhel", "9"): {
        "name": "RHEL 9 (and Rocky, AlmaLinux)",
        "distro_branches": (),  # no driver of its own: NVIDIA's repository is the distribution path
        "repo_folder": "rhel9",
        "repo_branches": ("535", "580"),  # DKMS module streams nvidia-driver:<branch>-dkms
        "tested": "unit",
    },
}

# os-release IDs that are the same platform as a PLATFORMS entry.
ALIASES = {"rocky": "rhel", "almalinux": "rhel", "centos": "rhel"}
DEBIAN_LIKE = ("debian", "ubuntu")

# NVIDIA allocates PCI device IDs by GPU chip. The oldest driver branch that supports each generation;
# a GPU with no range here is older than Ampere (R470 supports it) or newer than Blackwell.
GPU_GENERATIONS: List[Tuple[int, int, str, str]] = [
    (0x2000, 0x25FF, "Ampere (A100, A30, A10, A40, A16, A2)", "470"),
    (0x2300, 0x23FF, "Hopper (H100, H200, H800, H20, GH200)", "525"),
    (0x2680, 0x28FF, "Ada Lovelace (L4, L40, L40S, RTX 6000 Ada)", "525"),
    (0x2900, 0x2FFF, "Blackwell (B100, B200, GB200, RTX PRO 6000 Blackwell)", "570"),
]
NEWEST_KNOWN_ID = 0x2FFF
NEWER_THAN_KNOWN = "580"

# The memory of NVIDIA GPUs by PCI device ID, for what preflight checks before any driver runs (a
# quota or unit no GPU can give). Nominal sizes (the product's GB as GiB, in MiB): the driver shows a
# little less (an A10's 24 GB as 23028 MiB), so a quota refused here fits no such GPU, and one between
# the two is found by nvidia-smi once the driver runs. IDs from pci.ids; one that names boards of
# different sizes (Quadro RTX 6000/8000) is left out. A GPU not listed: the check says it could not
# check, and vgpu_gpu_memory_mib states it.
GPU_MEMORY_MIB: Dict[int, Tuple[int, str]] = {
    0x1DB1: (16384, "Tesla V100 SXM2 16GB"),
    0x1DB4: (16384, "Tesla V100 PCIe 16GB"),
    0x1DB5: (32768, "Tesla V100 SXM2 32GB"),
    0x1DB6: (32768, "Tesla V100 PCIe 32GB"),
    0x1DF6: (32768, "Tesla V100S PCIe 32GB"),
    0x1E07: (11264, "GeForce RTX 2080 Ti"),
    0x1EB8: (16384, "Tesla T4"),
    0x20B0: (40960, "A100 SXM4 40GB"),
    0x20B2: (81920, "A100 SXM4 80GB"),
    0x20B5: (81920, "A100 PCIe 80GB"),
    0x20B7: (24576, "A30"),
    0x20F1: (40960, "A100 PCIe 40GB"),
    0x2204: (24576, "GeForce RTX 3090"),
    0x2230: (49152, "RTX A6000"),
    0x2233: (24576, "RTX A5500"),
    0x2235: (49152, "A40"),
    0x2236: (24576, "A10"),
    0x2237: (24576, "A10G"),
    0x2322: (81920, "H800 PCIe"),
    0x2330: (81920, "H100 SXM5 80GB"),
    0x2331: (81920, "H100 PCIe"),
    0x2335: (144384, "H200 SXM 141GB"),  # as nvidia-smi reports it on an H200 (143771 MiB under driver 580)
    0x25B6: (16384, "A2 / A16 (16 GB per GPU)"),
    0x2684: (24576, "GeForce RTX 4090"),
    0x26B5: (49152, "L40"),
    0x26B9: (49152, "L40S"),
    0x27B8: (24576, "L4"),
}


def gpu_memory_of(device_id: int) -> Optional[Tuple[int, str]]:
    """(nominal MiB, product) of an NVIDIA PCI device ID, or None when the table does not know it."""
    return GPU_MEMORY_MIB.get(device_id)


def platform_of(distro_id: str, major: str) -> Optional[Dict[str, Any]]:
    """The matrix entry of a distribution release, or None when the collection does not support it."""
    return PLATFORMS.get((ALIASES.get(distro_id, distro_id), str(major)))


def supported_names() -> str:
    return ", ".join(p["name"] for p in PLATFORMS.values())


def minimum_branch(device_id: int) -> Tuple[str, str]:
    """(the oldest driver branch that supports the GPU, its generation) for an NVIDIA PCI device ID."""
    found = ("470", "older than Ampere")
    for low, high, generation, branch in GPU_GENERATIONS:
        if low <= device_id <= high:
            found = (branch, generation)  # later, narrower ranges (Hopper inside Ampere's) win
    if device_id > NEWEST_KNOWN_ID:
        found = (NEWER_THAN_KNOWN, "newer than Blackwell")
    return found


def platform_problems(
    *,
    distro_id: str,
    major: str,
    architecture: str,
    branch: str,
    method: str,
    policy: str,
    gpu_device_ids: List[int],
    installed: Optional[str] = None,
) -> List[str]:
    """What in the matrix this node and the requested driver fail; empty when the node is supported.

    ``method`` is the resolved method (distro, nvidia_repo, runfile or offline). Under policy
    ``minimum`` a node whose installed driver already satisfies the branch needs no packages, so the
    packaging checks do not apply there. An empty ``branch`` checks only the platform (a node that
    gets no driver).
    """
    problems = []
    if architecture not in ARCHITECTURES:
        problems.append(
            f"architecture {architecture} is not supported: libvgpu and the component image are built for "
            f"{', '.join(ARCHITECTURES)} only"
        )
    platform = platform_of(distro_id, major)
    if platform is None:
        problems.append(f"{distro_id} {major} is not supported; supported: {supported_names()} (docs/platforms.md)")
    if not branch:
        return problems
    if str(branch) not in BRANCHES:
        problems.append(f"driver branch {branch} is not offered; offered: {', '.join(BRANCHES)}")
    for device_id in gpu_device_ids:
        needed, generation = minimum_branch(device_id)
        if int(branch) < int(needed):
            problems.append(
                f"GPU 10de:{device_id:04x} ({generation}) needs driver branch {needed} or newer; "
                f"vgpu_driver_branch is {branch}: set vgpu_driver_branch to {needed_offer(needed)} "
                f"(and vgpu_driver_version, vgpu_cuda_version to match; the offered branches that support it: "
                f"{', '.join(b for b in BRANCHES if int(b) >= int(needed))})"
            )
    adequate = policy == "minimum" and installed and int(installed.split(".")[0]) >= int(branch)
    if platform is not None and not adequate:
        available = packaged_branches(platform, method)
        if available is not None and str(branch) not in available:
            where = "the distribution" if method in ("distro", "offline") else "NVIDIA's CUDA repository"
            offer = ", ".join(available) if available else "none"
            problems.append(
                f"driver branch {branch} is not packaged by {where} for {platform['name']} (it offers: {offer}); "
                "choose another vgpu_driver_branch or vgpu_driver_method (docs/platforms.md)"
            )
    return problems


def needed_offer(needed: str) -> str:
    """The offered branch to advise for a minimum branch: the oldest offered one at or above it."""
    for branch in BRANCHES:
        if int(branch) >= int(needed):
            return branch
    return needed


def packaged_branches(platform: Dict[str, Any], method: str) -> Optional[Tuple[str, ...]]:
    """The branches a method installs on a platform; None when the method takes any (the runfile)."""
    if method in ("distro", "offline"):
        return platform["distro_branches"] or platform["repo_branches"]
    if method == "nvidia_repo":
        return platform["repo_branches"]
    return None


def docs_table() -> str:
    """The Markdown table of docs/platforms.md."""
    lines = [
        "| platform | architecture | distribution packages | NVIDIA CUDA repository | tested by |",
        "| --- | --- | --- | --- | --- |",
    ]
    for platform in PLATFORMS.values():
        distro = ", ".join(platform["distro_branches"]) or "none (uses NVIDIA's repository)"
        lines.append(
            f"| {platform['name']} | {', '.join(ARCHITECTURES)} | {distro} | "
            f"{', '.join(platform['repo_branches'])} (`{platform['repo_folder']}`) | {platform['tested']} |"
        )
    return "\n".join(lines) + "\n"


def gpu_docs_table() -> str:
    """The GPU-generation table of docs/platforms.md."""
    lines = [
        "| PCI device IDs | generation | oldest branch | branch to set |",
        "| --- | --- | --- | --- |",
        "| below 0x2000 | older than Ampere (Kepler to Turing: K80, P100, V100, T4) | 470 | 470 |",
    ]
    for low, high, generation, branch in GPU_GENERATIONS:
        lines.append(f"| 0x{low:04x}-0x{high:04x} | {generation} | {branch} | {needed_offer(branch)} |")
    newest = NEWER_THAN_KNOWN
    lines.append(f"| above 0x{NEWEST_KNOWN_ID:04x} | newer than Blackwell | {newest} | {needed_offer(newest)} |")
    return "\n".join(lines) + "\n"


# --- the DRA path's container runtime -----------------------------------------------------------
# Rule: kubelet hands the CDI devices a DRA driver prepared to the runtime in the CRI request; only
# a runtime that applies them gives a claim's container its GPU and quota. containerd does from 1.7
# with enable_cdi = true, and by default from 2.0; 1.6 (Debian 12's) ignores them.
_CONTAINERD_VERSION = re.compile(r"\bv?(\d+)\.(\d+)\.(\d+)")
_ENABLE_CDI_ON = re.compile(r"^\s*enable_cdi\s*=\s*true\s*$", re.MULTILINE)


# Rule: containerd from 2.1 merges an imported file into config.toml key by key; before that an
# imported plugin section replaces config.toml's whole section (containerd issue 5837: nvidia-ctk's
# containerd engine says fixed in 2.1). So only from 2.1 does a drop-in hold the nvidia runtime
# alone; before it, config.toml holds the runtime itself and imports nothing.
def containerd_merges_drop_ins(version_text: str) -> bool:
    """Does this containerd (its `containerd --version` line) merge imported files key by key?
    False when the version cannot be read (the safe answer: no drop-ins)."""
    match = _CONTAINERD_VERSION.search(version_text or "")
    return match is not None and tuple(int(part) for part in match.groups()) >= (2, 1, 0)


def cdi_runtime_problem(version_text: str, config_dump: str = "") -> str:
    """What keeps this containerd (its `containerd --version` line, and for 1.7 its `containerd
    config dump`) from applying the CDI devices of claims; "" when nothing does."""
    match = _CONTAINERD_VERSION.search(version_text or "")
    if match is None:
        return (
            "cannot read a containerd version in %r: vgpu_scheduling dra needs containerd 1.7 or later, "
            "whose CRI applies the CDI devices of claims" % version_text.strip()
        )
    version = tuple(int(part) for part in match.groups())
    shown = ".".join(match.groups())
    if version >= (2, 0, 0):
        return ""
    if version >= (1, 7, 0):
        if _ENABLE_CDI_ON.search(config_dump):
            return ""
        return (
            "containerd %s applies the CDI devices of claims only with enable_cdi = true in the CRI plugin's "
            "section of /etc/containerd/config.toml (containerd config dump does not show it)" % shown
        )
    return (
        "containerd %s has no CDI support in its CRI: a claim's container would start without its GPU and "
        "quota. vgpu_scheduling dra needs containerd 1.7 or later (with enable_cdi = true; on by default from "
        "2.0) or CRI-O; keep vgpu_scheduling: extender on this node's cluster otherwise" % shown
    )
