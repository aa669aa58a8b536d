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

POLICIES = ("exact", "minimum")
METHODS = ("auto", "distro", "nvidia_repo", "runfile", "offline")

DEBIAN_LIKE = ("debian", "ubuntu")
REDHAT_LIKE = ("rhel", "centos", "rocky", "almalinux", "ol")

# NVIDIA's CUDA repository folder per distribution and major release (the ones that carry R470).
CUDA_REPO_DIRS = {
    ("debian", "10"): "debian10",
    ("debian", "11"): "debian11",
    ("debian", "12"): "debian12",
    ("ubuntu", "18"): "ubuntu1804",
    ("ubuntu", "20"): "ubuntu2004",
    ("ubuntu", "22"): "ubuntu2204",
    ("rhel", "7"): "rhel7",
    ("rhel", "8"): "rhel8",
}


# Archive components that carry the driver, added to the node's apt sources for method distro.
APT_COMPONENTS = {"debian": ["contrib", "non-free"], "ubuntu": ["restricted"]}


class PlanError(ValueError):
    """The request cannot be served on this node; the message says why and what would work."""


def os_family(distro_id: str) -> str:
    if distro_id in DEBIAN_LIKE:
        return "debian"
    if distro_id in REDHAT_LIKE:
        return "redhat"
    known = ", ".join(DEBIAN_LIKE + REDHAT_LIKE)
    raise PlanError(f"distribution {distro_id!r} is not supported; expected one of {known}")


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
    if major == "7":
        # EL7 has no module streams; the yum "branch" flavour keeps the branch.
        return [f"nvidia-driver-branch-{branch}", f"nvidia-driver-branch-{branch}-cuda"]
    # EL8 and later: the DKMS module stream locks the branch.
    return [f"@nvidia-driver:{branch}-dkms"]


def cuda_repo_url(distro_id: str, major: str, arch: str = "x86_64") -> str:
    key = ("rhel" if os_family(distro_id) == "redhat" else distro_id, major)
    folder = CUDA_REPO_DIRS.get(key)
    if folder is None:
        known = ", ".join(f"{d} {m}" for d, m in sorted(CUDA_REPO_DIRS))
        raise PlanError(f"NVIDIA's CUDA repository has no folder for {distro_id} {major}; known: {known}")
    return f"https://developer.download.nvidia.com/compute/cuda/repos/{folder}/{arch}/"


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
    if major == "7":
        return ["yum", "versionlock", "add", *names]
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
    if chosen in ("distro", "offline"):
        packages = distro_packages(distro_id, major, branch, ubuntu_server)
    elif chosen == "nvidia_repo":
        packages = nvidia_repo_packages(distro_id, major, branch)
    else:
        packages = []
    return {
        "family": family,
        "manager": "apt" if family == "debian" else ("yum" if major == "7" else "dnf"),
        "method": chosen,
        "packages": packages,
        "install_specs": install_specs(distro_id, packages, version) if packages else [],
        "hold_command": hold_command(distro_id, major, packages) if packages else [],
        "hold_packages": [p for p in packages if not p.startswith("@")],
        "version_glob": version_glob(distro_id, version),
        "headers_package": headers_package(distro_id, kernel),
        "dkms_package": "dkms",
        "cuda_repo_url": cuda_repo_url(distro_id, major, arch) if chosen == "nvidia_repo" else None,
        "apt_components": APT_COMPONENTS.get(distro_id, []),
        "initramfs_command": ["update-initramfs", "-u"] if family == "debian" else ["dracut", "-f"],
        "runfile_args": ["--silent", "--dkms", "--disable-nouveau", "--no-x-check", "--no-opengl-files"],
    }
