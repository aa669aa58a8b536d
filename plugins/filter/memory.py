# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The mib filter: a memory size of the inventory in MiB.

Memory sizes are read by module_utils/memory_size.py, the parser the modules use too, so a size means the
same on the controller and on the nodes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib


def mib(value, name="value", minimum=1):
    """Filter form of parse_mib: ``'3GiB' | vgpu.isolation.mib('vgpu_sample_app_quota')`` gives 3072.

    ``minimum=0`` accepts an amount that may be nothing (a reserve, an allowance).
    """
    try:
        return parse_mib(value, name, int(minimum))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    """GPU-memory filters of vgpu.isolation."""

    def filters(self):
        return {"mib": mib}
