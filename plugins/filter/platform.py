# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters over the support matrix (module_utils/platforms.py) and the driver plan (nvidia_driver.py).

Both are pure, so they run on the controller over the facts a node reported: preflight asks
platform_problems before anything changes, the nvidia_driver role asks nvidia_driver_plan what to do.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_info import branch_of
from ansible_collections.vgpu.isolation.plugins.module_utils.nvidia_driver import PlanError, plan, resolve_method
from ansible_collections.vgpu.isolation.plugins.module_utils.platforms import (
    cdi_runtime_problem,
    containerd_merges_drop_ins,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.platforms import platform_problems as _problems


def _device_id(value):
    """An NVIDIA PCI device ID from sysfs ("0x2335") or lspci ("2335") text, or an int."""
    if isinstance(value, int):
        return value
    return int(str(value).strip().lower().replace("0x", ""), 16)


def platform_problems(node, branch, method="auto", policy="exact"):
    """What the support matrix says is wrong for this node and driver request; empty when supported.

    ``node`` holds ``distribution`` ({id, major}), ``architecture``, ``gpu_device_ids`` (PCI device IDs
    of the NVIDIA display controllers) and optionally ``driver_installed_version``.
    """
    distribution = node.get("distribution") or {}
    try:
        chosen = resolve_method(method, distribution.get("id", ""))
    except PlanError:
        chosen = method  # an unknown distribution: platform_problems names it
    try:
        ids = [_device_id(d) for d in node.get("gpu_device_ids") or []]
    except ValueError as exc:
        raise AnsibleFilterError("platform_problems: a PCI device ID is not hexadecimal: %s" % exc) from exc
    return _problems(
        distro_id=distribution.get("id", ""),
        major=str(distribution.get("major", "")),
        architecture=node.get("architecture", ""),
        branch=str(branch),
        method=chosen,
        policy=policy,
        gpu_device_ids=ids,
        installed=node.get("driver_installed_version"),
    )


def nvidia_driver_plan(gpu, version, branch=None, policy="exact", method="auto", **node):
    """The nvidia_driver role's plan for a node, from its gpu_facts (``ansible_facts.gpu``).

    ``node`` may give ``ubuntu_server`` (the -server packages on Ubuntu, default true) and ``arch``.
    """
    try:
        return plan(
            distro_id=gpu["distribution"]["id"],
            major=gpu["distribution"]["major"],
            kernel=gpu["kernel"],
            branch=str(branch or branch_of(version)),
            version=str(version),
            policy=policy,
            method=method,
            installed=gpu.get("driver_installed_version"),
            arch=node.get("arch", "x86_64"),
            ubuntu_server=bool(node.get("ubuntu_server", True)),
        )
    except (PlanError, ValueError, KeyError) as exc:
        raise AnsibleFilterError("nvidia_driver_plan: %s" % exc) from exc


class FilterModule(object):
    """Support-matrix filters of vgpu.isolation."""

    def filters(self):
        return {
            "platform_problems": platform_problems,
            "nvidia_driver_plan": nvidia_driver_plan,
            "cdi_runtime_problem": cdi_runtime_problem,
            "containerd_merges_drop_ins": containerd_merges_drop_ins,
        }
