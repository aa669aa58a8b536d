# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an offline bundle must hold for one host, checked by preflight before anything changes.

The layout is the one `make bundle` (files/bundle/build.sh, roles/offline_bundle) writes and the
roles read; tests/unit/plugins/filter/test_bundle.py keeps the package lists below equal to the
roles' own. ``bundle_problems`` takes the bundle's file list (its SHA256SUMS) and what the host
runs, and names each missing piece with the folder it belongs in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Folder -> the packages a role installs from it (Debian names; Red Hat differ where noted).
KUBEADM_PACKAGES = (
    "kubeadm",
    "kubelet",
    "kubectl",
    "cri-tools",
    "containerd",
    "runc",
    "containernetworking-plugins",
    "flannel",
)
# vgpu_scheduling dra on kubeadm: a containerd whose CRI applies CDI devices (built from source).
CONTAINERD_CDI_PACKAGES = ("containerd",)
TOOLKIT_PACKAGES = ("nvidia-container-toolkit-base",)
BUILD_TOOLS = {"Debian": ("gcc", "make", "libc6-dev"), "RedHat": ("gcc", "make", "glibc-devel")}
CRYPTO_PACKAGES = ("python3-cryptography",)
WHEELS = ("pip", "kubernetes")
K3S_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
# What each role needs from the bundle (the roles a playbook runs decide what is checked).
ROLES = ("cluster", "nvidia_driver", "nvidia_container_runtime", "vgpu_interposer", "vgpu_stack")


def _package_names(listing, folder, family):
    """Package names of the .deb (name_version_arch.deb) or .rpm (name-version-release.arch.rpm) files of a folder."""
    names = set()
    for path in listing:
        head, _sep, base = path.rpartition("/")
        if head != folder:
            continue
        if family == "Debian" and base.endswith(".deb"):
            names.add(base.split("_", 1)[0])
        elif family != "Debian" and base.endswith(".rpm"):
            names.add(re.sub(r"-[^-]+-[^-]+\.rpm$", "", base))
    return names


def _wheel_names(listing, folder):
    """Project names of the wheels of a folder (name-version-...whl)."""
    wheels = [path for path in listing if path.startswith(folder + "/") and path.endswith(".whl")]
    return {path.rpartition("/")[2].split("-", 1)[0].lower() for path in wheels}


def _missing_packages(listing, folder, wanted, family, why):
    missing = [name for name in wanted if name not in _package_names(listing, folder, family)]
    if not missing:
        return []
    return ["%s/ has no package for %s (%s)" % (folder, ", ".join(missing), why)]


def _missing_files(listing, files, why):
    missing = [name for name in files if name not in listing]
    return ["%s is missing (%s)" % (name, why) for name in missing]


def bundle_needs(host):
    """The pieces of the bundle one host needs, as (kind, folder or files, names, why) tuples.

    ``host`` describes it: roles (what the playbook runs, of ROLES), flavour, kubernetes_version,
    scheduling, architecture, os_family, gpu_node, first_control_plane, driver_method,
    driver_version, has_compiler.
    """
    roles = host.get("roles", ROLES)
    family = host.get("os_family", "Debian")
    arch = host.get("architecture", "x86_64")
    flavour = host.get("flavour", "k3s")
    needs: list = []
    if "cluster" in roles and flavour == "kubeadm":
        needs.append(("packages", "kubeadm", KUBEADM_PACKAGES, "kubeadm installs Kubernetes from it"))
        version = str(host.get("kubernetes_version", "")).lstrip("v")
        needs.append(("files", None, ["images/kubernetes-v%s.tar" % version], "kubeadm imports its images from it"))
        if host.get("scheduling") == "dra":
            why = "vgpu_scheduling dra: a containerd whose CRI applies the CDI devices of claims"
            needs.append(("packages", "containerd-cdi", CONTAINERD_CDI_PACKAGES, why))
    if "cluster" in roles and flavour == "k3s":
        k3s_arch = K3S_ARCH.get(arch, arch)
        binary = "k3s/k3s" if k3s_arch == "amd64" else "k3s/k3s-%s" % k3s_arch
        images = "k3s/k3s-airgap-images-%s.tar.zst" % k3s_arch
        needs.append(("files", None, [binary, images], "the k3s role installs K3s from them"))
    if host.get("gpu_node"):
        if "nvidia_container_runtime" in roles:
            needs.append(("packages", "container-toolkit", TOOLKIT_PACKAGES, "the NVIDIA container runtime"))
        if "vgpu_interposer" in roles and not host.get("has_compiler"):
            tools = BUILD_TOOLS.get(family, BUILD_TOOLS["Debian"])
            needs.append(("packages", "build-tools", tools, "the node has no compiler to build libvgpu"))
        method = host.get("driver_method", "auto")
        if "nvidia_driver" in roles and method == "offline":
            needs.append(("any", "driver", ("deb" if family == "Debian" else "rpm",), "vgpu_driver_method offline"))
        if "nvidia_driver" in roles and method == "runfile":
            runfile = "driver/NVIDIA-Linux-%s-%s.run" % (arch, host.get("driver_version", ""))
            needs.append(("files", None, [runfile], "vgpu_driver_method runfile"))
    if host.get("first_control_plane") and "vgpu_stack" in roles and flavour != "none":
        needs.append(("packages", "python-client", CRYPTO_PACKAGES, "the extender's certificates"))
        needs.append(("wheels", "python-client/wheels", WHEELS, "the Kubernetes modules' virtualenv"))
    return needs


def bundle_problems(listing, host):
    """One problem per piece of the bundle this host needs and does not find in ``listing``.

    ``listing``: the bundle's files relative to its folder (the paths of its SHA256SUMS);
    ``host``: as bundle_needs takes it."""
    listing = set(listing)
    family = host.get("os_family", "Debian")
    problems = []
    for kind, folder, names, why in bundle_needs(host):
        if kind == "packages":
            problems += _missing_packages(listing, folder, names, family, why)
        elif kind == "wheels":
            missing = [name for name in names if name not in _wheel_names(listing, folder)]
            if missing:
                problems.append("%s/ has no wheel of %s (%s)" % (folder, ", ".join(missing), why))
        elif kind == "any":
            if not any(path.startswith(folder + "/") and path.endswith("." + names[0]) for path in listing):
                problems.append("%s/ has no .%s package (%s)" % (folder, names[0], why))
        else:
            problems += _missing_files(listing, names, why)
    return ["offline bundle: " + problem for problem in problems]


def sums_listing(text):
    """The file paths of a SHA256SUMS text ("<hash>  <path>" per line)."""
    paths = []
    for line in str(text).splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            paths.append(parts[1].lstrip("*").strip())
    return paths


class FilterModule(object):
    """The offline bundle's completeness."""

    def filters(self):
        return {"bundle_problems": bundle_problems, "bundle_needs": bundle_needs, "sums_listing": sums_listing}
