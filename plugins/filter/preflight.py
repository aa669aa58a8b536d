# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Preflight's rules about one node (roles/preflight): pure functions over what its tasks observed.

The role's tasks only look (PCI devices, device files, nvidia-smi, the bundle, the image, the mirror)
and pass what they saw here as one mapping; each rule below says what is wrong and how to fix it,
one line each. preflight's report then names each problem once with its hosts (settings_report).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib
from ansible_collections.vgpu.isolation.plugins.module_utils.platforms import gpu_memory_of
from ansible_collections.vgpu.isolation.plugins.module_utils.topology import unjoined_problems


def mig_gpus(smi_lines):
    """The index of each GPU nvidia-smi reports in MIG mode ("23028, Enabled" per GPU)."""
    modes = [([*line.split(","), ""])[1].strip().lower() for line in smi_lines or []]
    return [index for index, mode in enumerate(modes) if mode == "enabled"]


def _mig(seen):
    indices = mig_gpus(seen.get("smi_lines")) if seen.get("smi_rc", 1) == 0 else []
    if not indices:
        return None
    return (
        "GPU %s has MIG mode enabled: vgpu.isolation shares whole GPUs by memory quota, and a container given the "
        "whole GPU of a MIG GPU finds no usable CUDA device; disable MIG (nvidia-smi -i <index> -mig 0, then reset "
        "the GPU or reboot), or move this host out of the gpu_nodes group" % ", ".join(str(i) for i in indices)
    )


def _no_gpu(seen):
    if not seen.get("require_gpu") or seen.get("nvidia_pci_devices") or seen.get("nvidia_device_files"):
        return None
    return (
        "no NVIDIA GPU found (no PCI device with vendor 0x10de, no /dev/nvidia<N>): run on a GPU node, or move this "
        "host out of the gpu_nodes group"
    )


def _bundle_missing(seen):
    bundle = seen.get("bundle_dir") or ""
    if not bundle or seen.get("bundle_exists"):
        return None
    return (
        "vgpu_offline_bundle_dir: %s has no %s on the controller; build the bundle with playbooks/bundle.yml on a "
        "connected machine and copy it there" % (bundle, seen.get("bundle_manifest"))
    )


def _bundle_damaged(seen):
    if seen.get("bundle_check_rc", 0) == 0:
        return None
    return (
        "vgpu_offline_bundle_dir: files of %s do not match %s (damaged or changed since the bundle was built): %s"
        % (seen.get("bundle_dir"), seen.get("bundle_manifest"), "; ".join(seen.get("bundle_check_lines") or []))
    )


def _no_image(seen):
    if seen.get("flavour") == "none" or not seen.get("image_import") or seen.get("image_tarball_exists"):
        return None
    if seen.get("image") in (seen.get("images_present") or []):
        return None
    return (
        "component image: %s is not in containerd on this node and its tarball %s is not on the controller; build it "
        "with `make image` in a checkout of the collection (`make site` builds it when missing; the installed "
        "collection has no Makefile), or take it from an offline bundle (`make bundle`), set "
        "vgpu_component_image_tarball, or pull it from a registry: vgpu_component_image_import: false"
        % (seen.get("image"), seen.get("image_tarball"))
    )


def _cni_manifest(seen):
    # kubeadm's pod network manifest is read on the controller only after kubeadm init.
    manifest = seen.get("cni_manifest") or ""
    if seen.get("flavour") != "kubeadm" or not manifest or seen.get("cni_manifest_exists"):
        return None
    return (
        "kubeadm_cni_manifest_src: %s (the pod network of the cluster) is not on the controller; give the path of a "
        "network plugin manifest (flannel, Calico) there, or leave it empty for the bridge network of kubeadm_cni"
        % manifest
    )


def _flannel_without_bundle(seen):
    # flanneld comes from the offline bundle's flannel package only: no distribution packages it.
    if seen.get("flavour") != "kubeadm" or seen.get("cni") != "flannel" or seen.get("kubeadm_bundle_dir"):
        return None
    return (
        "kubeadm_cni: flannel runs flanneld from the offline bundle, and this site has none (vgpu_offline_bundle_dir "
        "is empty); build one with `make bundle` and set vgpu_offline_bundle_dir, or give the pod network as a "
        "manifest (kubeadm_cni_manifest_src: kube-flannel.yml or a Calico manifest), or use kubeadm_cni: bridge on "
        "a one-node site"
    )


def _mirror(seen):
    if int(seen.get("mirror_status", 200)) == 200:
        return None
    url, answer = seen.get("mirror_url") or "", seen.get("mirror_msg") or "no answer"
    if not seen.get("bundle_dir"):
        return (
            "no network and no offline artifacts: the package mirror %s did not answer (%s); set "
            "vgpu_offline_bundle_dir to a folder holding the offline bundle, or give the node a package mirror"
            % (url, answer)
        )
    return (
        "vgpu_driver_method %s installs the driver from the package mirror %s, which did not answer (%s); set "
        "vgpu_driver_method: offline to install it from the driver/ folder of the bundle (make bundle with "
        "BUNDLE_PARTS including driver), runfile, or none" % (seen.get("driver_method"), url, answer)
    )


RULES = (_mig, _no_gpu, _bundle_missing, _bundle_damaged, _no_image, _cni_manifest, _flannel_without_bundle, _mirror)


def node_problems(seen):
    """Every problem of one node by preflight's rules, one line each (empty when there is none).

    ``seen`` is what the role's tasks observed: require_gpu, nvidia_pci_devices, nvidia_device_files
    (counts), smi_rc and smi_lines (nvidia-smi's memory and MIG mode), bundle_dir, bundle_manifest,
    bundle_exists, bundle_check_rc and bundle_check_lines, flavour, image_import, image, image_tarball,
    image_tarball_exists, images_present, cni, cni_manifest, cni_manifest_exists, kubeadm_bundle_dir,
    mirror_url, mirror_status, mirror_msg and driver_method.
    """
    return [problem for problem in (rule(seen) for rule in RULES) if problem]


def _device_id(value):
    try:
        return int(str(value).strip().lower().replace("0x", ""), 16)
    except ValueError:
        return None


def gpu_sizes(nodes):
    """The memory of every GPU preflight can know before the driver runs, and what it could not know.

    ``nodes`` maps each GPU host to what preflight saw there: ``smi_rc`` and ``smi_lines`` (nvidia-smi's
    "MiB, MIG mode" per GPU, where a driver runs), ``stated`` (vgpu_gpu_memory_mib) and ``pci_ids`` (the
    NVIDIA display controllers' PCI device IDs). Each host's GPUs come from the first of those that has
    them. Returns ``gpus``, a [where, MiB] per GPU, and ``unknown``, one line per host whose GPUs none
    of them sizes.
    """
    gpus, unknown = [], []
    for host, seen in nodes.items():
        lines = seen.get("smi_lines") or [] if seen.get("smi_rc", 1) == 0 else []
        if lines:
            for index, line in enumerate(lines):
                mib = parse_mib(str(line).split(",", 1)[0].strip(), "nvidia-smi memory.total")
                gpus.append(["%s's GPU %d" % (host, index), mib])
            continue
        stated = seen.get("stated") or []
        if stated:
            for index, size in enumerate(stated):
                gpus.append(["%s's GPU %d" % (host, index), parse_mib(size, "vgpu_gpu_memory_mib[%d]" % index)])
            continue
        missing = []
        for index, value in enumerate(seen.get("pci_ids") or []):
            device = _device_id(value)
            known = gpu_memory_of(device) if device is not None else None
            if known is None:
                missing.append("10de:%s" % str(value).lower().replace("0x", ""))
                continue
            mib, product = known
            gpus.append(["%s's GPU %d (%s by its PCI ID, %d MiB nominal)" % (host, index, product, mib), mib])
        if missing:
            unknown.append(
                "%s: could not check vgpu_memory_unit_mib and vgpu_sample_app_quota against its GPU(s) %s: no driver "
                "runs there yet, vgpu_gpu_memory_mib does not state their memory, and their PCI IDs are not in the "
                "collection's table of GPU sizes; state them in its host_vars (vgpu_gpu_memory_mib: [24GiB])"
                % (host, ", ".join(missing))
            )
    return {"gpus": gpus, "unknown": unknown}


def unreachable_problem(message, address=""):
    """The problem of a host that did not answer (Ansible's message, folded onto one line)."""
    said = " ".join(str(message or "no answer").split())
    said = said[len("Task failed: ") :] if said.startswith("Task failed: ") else said
    return (
        "unreachable at %s: %s; check that the host is up and that its address (ansible_host), user (ansible_user) "
        "and SSH key are right, or remove it from the inventory" % (address, said)
    )


class FilterModule(object):
    """Preflight's rules about a node."""

    def filters(self):
        return {
            "node_problems": node_problems,
            "unreachable_problem": unreachable_problem,
            "unjoined_problems": unjoined_problems,
            "gpu_sizes": gpu_sizes,
        }
