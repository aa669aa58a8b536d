# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters that parse and validate the GPU-memory settings of the inventory.

Memory sizes are read by module_utils/memory_size.py, the parser the modules use too, so a size means the
same on the controller and on the nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib

FLAVOURS = ("k3s", "kubeadm", "none")
_PREFIX = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


def mib(value, name="value"):
    """Filter form of parse_mib: ``'3GiB' | vgpu.isolation.mib('vgpu_sample_app_quota')`` gives 3072."""
    try:
        return parse_mib(value, name)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def _whole_number(value):
    """An int, or a string of digits (what ``-e name=64`` on the command line gives); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def _int_in_range(settings, name, low, high, problems):
    value = _whole_number(settings.get(name))
    if value is None or not low <= value <= high:
        problems.append("%s: %r must be a whole number from %d to %d" % (name, settings.get(name), low, high))
        return None
    return value


def settings_problems(settings):
    """Check the cross-variable rules of the data model; return a list of problems (empty when valid).

    ``settings`` maps variable names to values (see docs/variables.md). ``vgpu_gpu_memory_mib`` is
    optional: a list of per-GPU memory sizes stated in the inventory or found by gpu_facts.
    """
    problems = []
    flavour = settings.get("vgpu_kubernetes_flavour")
    if flavour not in FLAVOURS:
        problems.append(
            "vgpu_kubernetes_flavour: %r is not supported; expected one of %s" % (flavour, ", ".join(FLAVOURS))
        )
    prefix = settings.get("vgpu_resource_prefix")
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        problems.append("vgpu_resource_prefix: %r must be a DNS subdomain such as 'vgpu.io'" % (prefix,))
    unit = _int_in_range(settings, "vgpu_memory_unit_mib", 1, 1024 * 1024, problems)
    reserved = _whole_number(settings.get("vgpu_reserved_memory_mib", 0))
    if reserved is None or reserved < 0:
        problems.append(
            "vgpu_reserved_memory_mib: %r must be a whole number of MiB, 0 or more"
            % (settings.get("vgpu_reserved_memory_mib"),)
        )
        reserved = 0
    _int_in_range(settings, "vgpu_mps_active_thread_percentage", 1, 100, problems)

    sizes = {}
    for name in ("vgpu_sample_app_quota", "vgpu_sample_app_use"):
        try:
            sizes[name] = parse_mib(settings.get(name), name)
        except ValueError as exc:
            problems.append(str(exc))
    quota = sizes.get("vgpu_sample_app_quota")
    if unit and quota and quota % unit:
        problems.append(
            "vgpu_sample_app_quota: %d MiB is not a multiple of vgpu_memory_unit_mib (%d MiB); "
            "pods request whole units, so quotas must be multiples of the unit" % (quota, unit)
        )
    use = sizes.get("vgpu_sample_app_use")
    if quota and use and use > quota:
        problems.append(
            "vgpu_sample_app_use: %d MiB is more than vgpu_sample_app_quota (%d MiB); the sample app "
            "must fit its quota (the verification checks the over-quota case itself)" % (use, quota)
        )
    for index, stated in enumerate(settings.get("vgpu_gpu_memory_mib") or []):
        try:
            total = parse_mib(stated, "vgpu_gpu_memory_mib[%d]" % index)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if unit and (total - reserved) % unit:
            problems.append(
                "vgpu_memory_unit_mib: %d MiB does not divide GPU %d's %d MiB (less %d MiB reserved); "
                "choose a unit that divides %d" % (unit, index, total, reserved, total - reserved)
            )
        if total <= reserved:
            problems.append(
                "vgpu_reserved_memory_mib: %d MiB leaves nothing of GPU %d's %d MiB" % (reserved, index, total)
            )
    return problems


class FilterModule(object):
    """GPU-memory filters of vgpu.isolation."""

    def filters(self):
        return {"mib": mib, "settings_problems": settings_problems}
