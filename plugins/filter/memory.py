# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mib filter: a memory size of the inventory in MiB; gpu_units: what each GPU offers in units.

Memory sizes are read by module_utils/memory_size.py, the parser the modules use too, so a size means the
same on the controller and on the nodes; a GPU's units follow its units_for, the device plugin's rule.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib, units_for


def mib(value, name="value", minimum=1):
    """Filter form of parse_mib: ``'3GiB' | vgpu.isolation.mib('vgpu_sample_app_quota')`` gives 3072.

    ``minimum=0`` accepts an amount that may be nothing (a reserve, an allowance).
    """
    try:
        return parse_mib(value, name, int(minimum))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def gpu_units(gpus, unit, reserved=0):
    """What each GPU (gpu_facts' ``gpus``: index, name, memory_total_mib) offers: its whole units of
    ``unit``, the MiB they hold, and the remainder left unused (below one unit, after ``reserved``)."""
    unit_mib, reserved_mib = mib(unit, "vgpu_memory_unit_mib"), mib(reserved, "vgpu_reserved_memory_mib", 0)
    out = []
    for gpu in gpus or []:
        total = gpu.get("memory_total_mib")
        if total is None:
            continue
        units = units_for(int(total), reserved_mib, unit_mib)
        out.append(
            {
                "index": gpu.get("index"),
                "name": gpu.get("name"),
                "total_mib": int(total),
                "units": units,
                "usable_mib": units * unit_mib,
                "reserved_mib": min(reserved_mib, int(total)),
                "unused_mib": max(0, int(total) - reserved_mib - units * unit_mib),
            }
        )
    return out


class FilterModule(object):
    """GPU-memory filters of vgpu.isolation."""

    def filters(self):
        return {"mib": mib, "gpu_units": gpu_units}
