# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_driver role must do on one node: packages, pins, holds, and whether to act.

Pure functions of the node's distribution, its installed driver and the requested driver, so the
distro logic the test machine cannot converge (Ubuntu, RHEL) is unit-tested.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_info import branch_of, version_tuple
from ansible_collections.vgpu.isolation.plugins.module_utils.platforms import (
    ALIASES,
    DEBIAN_LIKE,
    packaged_branches,
    platform_of,
    supported_names,
)

POLICIES = ("exact", "minimum")
METHODS = ("auto", "distro", "nvidia_repo", "runfile", "offline")


class PlanError(ValueError):
    """The request cannot be served on this node; the message says why and what would work."""


def os_family(distro_id: str) -> str:
    if distro_id in DEBIAN_LIKE:
        return "debian"
    if ALIASES.get(distro_id, distro_id) == "rhel":
        return "redhat"
    raise PlanError(f"distribution {distro_id!r} is not supported; supported: {supported_names()}")


def apt_components(distro_id: str, major: str) -> List[str]:
    """Archive components that carry the driver, added to the node's apt sources for method distro."""
    if distro_id == "ubuntu":
        return ["restricted"]
    if distro_id == "debian":
        # Debian 12 moved the GSP firmware that R535 and later need to non-free-firmware.
        return ["contrib", "non-free"] + (["non-free-firmware"] if int(major) >= 12 else [])
    return []


def distro_packages(distro_id: str, major: str, branch: str, ubuntu_server: bool = True) -> List[str]:
    """The distribution's own packages for one branch (method ``distro``)."""
    family = os_family(distro_id)
    if distro_id == "debian":
        # Debian ships the datacenter branch as nvidia-tesla-<branch>; nvidia-smi and the CUDA and
        # NVML libraries are separate packages there.
        prefix = f"nvidia-tesla-{branch}"
        return [
            f"{prefix}-driver",
            f"{prefix}-kernel-dkms",
            f"{prefix}-smi",
            f"libnvidia-tesla-{branch}-cuda1",
            f"libnvidia-tesla-{branch}-ml1",
        ]
    if distro_id == "ubuntu":
        suffix = "-server" if ubuntu_server else ""
        return [f"nvidia-driver-{branch}{suffix}", f"nvidia-utils-{branch}{suffix}"]
    if family == "redhat":
        # RHEL has no driver of its own: the CUDA repository is the distribution path there.
        return nvidia_repo_packages(distro_id, major, branch)
    raise PlanError(f"no distribution packages for {distro_id} {major}")


def nvidia_repo_packages(distro_id: str, major: str, branch: str) -> List[str]:
    """Packages from NVIDIA's CUDA repository (method ``nvidia_repo``)."""
    if os_family(distro_id) == "debian":
        return [f"cuda-drivers-{branch}"]
    # The DKMS module stream locks the branch.
    return [f"@nvidia-driver:{branch}-dkms"]


def cuda_repo_url(distro_id: str, major: str, arch: str = "x86_64") -> str:
    platform = platform_of(distro_id, major)
    if platform is None:
        raise PlanError(f"{distro_id} {major} is not supported; supported: {supported_names()}")
    return f"https://developer.download.nvidia.com/compute/cuda/repos/{platform['repo_folder']}/{arch}/"


def check_packaged(distro_id: str, major: str, branch: str, method: str) -> None:
    """PlanError unless the method installs the branch on this release (the support matrix)."""
    platform = platform_of(distro_id, major)
    if platform is None:
        raise PlanError(f"{distro_id} {major} is not supported; supported: {supported_names()}")
    available = packaged_branches(platform, method)
    if available is not None and str(branch) not in available:
        where = "the distribution" if method in ("distro", "offline") else "NVIDIA's CUDA repository"
        raise PlanError(
            f"driver branch {branch} is not packaged by {where} for {platform['name']} "
            f"(it offers: {', '.join(available) or 'none'})"
        )


def headers_package(distro_id: str, kernel: str) -> str:
    """The package with the headers of the running kernel, which DKMS builds against."""
    if os_family(distro_id) == "debian":
        return f"linux-headers-{kernel}"
    return f"kernel-devel-{kernel}"


def version_glob(distro_id: str, version: str) -> str:
    """The package version pattern that pins the exact upstream driver version."""
    if os_family(distro_id) == "debian":
        # Debian and Ubuntu add a revision: 470.256.02-1~deb12u1, 470.256.02-0ubuntu0.22.04.1.
        return f"{version}-*"
    return f"{version}*"


def install_specs(distro_id: str, packages: List[str], version: str) -> List[str]:
    """Package specs for the package manager: every versioned package pinned to the version."""
    glob = version_glob(distro_id, version)
    specs = []
    for name in packages:
        if name.startswith("@"):
            specs.append(name)  # a module stream carries its own lock
        elif os_family(distro_id) == "debian":
            specs.append(f"{name}={glob}")
        else:
            specs.append(f"{name}-{glob}")
    return specs


def apt_preferences(packages: List[str], version: str) -> str:
    """An apt preferences stanza that keeps the packages at the version even on apt upgrade."""
    return f"Package: {' '.join(packages)}\nPin: version {version}-*\nPin-Priority: 1001\n"


def hold_command(distro_id: str, major: str, packages: List[str]) -> List[str]:
    """The command that holds the installed packages against upgrades."""
    names = [p for p in packages if not p.startswith("@")]
    if os_family(distro_id) == "debian":
        return ["apt-mark", "hold", *names]
    # A module stream already locks the branch; versionlock keeps the exact version inside it.
    return ["dnf", "versionlock", "add", "nvidia-driver*", "kmod-nvidia*", *names]


def decide(policy: str, wanted: str, installed: Optional[str]) -> Dict[str, Any]:
    """Whether the node needs the driver installed, given the policy and the installed version.

    ``exact``: the installed version must equal the wanted one (anything else is drift).
    ``minimum``: any installed version of the wanted branch or newer is adequate.
    """
    if policy not in POLICIES:
        raise PlanError(f"driver policy {policy!r} is not one of {', '.join(POLICIES)}")
    wanted_t = version_tuple(wanted)
    if not installed:
        return {"action": "install", "reason": f"no NVIDIA driver is installed; {wanted} will be", "drift": False}
    installed_t = version_tuple(installed)
    if policy == "exact":
        if installed_t == wanted_t:
            return {"action": "none", "reason": f"driver {installed} is installed as pinned", "drift": False}
        return {
            "action": "install",
            "reason": f"driver {installed} is installed but {wanted} is pinned (policy exact)",
            "drift": True,
        }
    if installed_t[0] >= wanted_t[0]:
        return {
            "action": "none",
            "reason": f"driver {installed} satisfies at least branch {branch_of(wanted)} (policy minimum)",
            "drift": False,
        }
    return {
        "action": "install",
        "reason": f"driver {installed} is older than branch {branch_of(wanted)} (policy minimum)",
        "drift": True,
    }


def resolve_method(method: str, distro_id: str) -> str:
    if method not in METHODS:
        raise PlanError(f"driver method {method!r} is not one of {', '.join(METHODS)}")
    if method != "auto":
        return method
    # auto: the distribution's packages where it has them, NVIDIA's repository elsewhere.
    return "distro" if os_family(distro_id) == "debian" else "nvidia_repo"


def plan(
    *,
    distro_id: str,
    major: str,
    kernel: str,
    branch: str,
    version: str,
    policy: str = "exact",
    method: str = "auto",
    installed: Optional[str] = None,
    arch: str = "x86_64",
    ubuntu_server: bool = True,
) -> Dict[str, Any]:
    """Everything the role needs to install, pin and hold the driver on this node.

    Under ``minimum`` a node whose driver is adequate needs nothing, so a distribution this module has
    no packages for is not an error there: the plan says so and lists nothing to install.
    """
    if branch_of(version) != str(branch):
        raise PlanError(f"driver version {version!r} is not in branch {branch!r}; set both to the same branch")
    decision = decide(policy, version, installed)
    try:
        result = _install_plan(
            distro_id=distro_id,
            major=major,
            kernel=kernel,
            branch=branch,
            version=version,
            method=method,
            arch=arch,
            ubuntu_server=ubuntu_server,
        )
    except PlanError as error:
        if policy != "minimum" or decision["action"] != "none":
            raise
        result = {"family": "unknown", "method": method, "packages": [], "install_specs": [], "hold_packages": []}
        decision["reason"] += f"; nothing could be installed here anyway ({error})"
    result.update(decision)
    return result


def _install_plan(
    *, distro_id: str, major: str, kernel: str, branch: str, version: str, method: str, arch: str, ubuntu_server: bool
) -> Dict[str, Any]:
    family = os_family(distro_id)
    chosen = resolve_method(method, distro_id)
    check_packaged(distro_id, major, branch, chosen)
    if chosen in ("distro", "offline"):
        packages = distro_packages(distro_id, major, branch, ubuntu_server)
    elif chosen == "nvidia_repo":
        packages = nvidia_repo_packages(distro_id, major, branch)
    else:
        packages = []
    return {
        "family": family,
        "manager": "apt" if family == "debian" else "dnf",
        "method": chosen,
        "packages": packages,
        "install_specs": install_specs(distro_id, packages, version) if packages else [],
        "hold_command": hold_command(distro_id, major, packages) if packages else [],
        "hold_packages": [p for p in packages if not p.startswith("@")],
        "version_glob": version_glob(distro_id, version),
        "headers_package": headers_package(distro_id, kernel),
        "dkms_package": "dkms",
        "cuda_repo_url": cuda_repo_url(distro_id, major, arch) if chosen == "nvidia_repo" else None,
        "apt_components": apt_components(distro_id, major),
        "initramfs_command": ["update-initramfs", "-u"] if family == "debian" else ["dracut", "-f"],
        "runfile_args": ["--silent", "--dkms", "--disable-nouveau", "--no-x-check", "--no-opengl-files"],
    }
