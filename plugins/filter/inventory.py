# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The inventory check: the playbooks act on the groups k8s_control_plane and gpu_nodes.

A wrong inventory path or a misspelt group made every play "skip: no hosts matched" and the run
exit 0; playbooks/check.yml runs this first, on the controller, and stops with what to fix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import os

from ansible_collections.vgpu.isolation.plugins.module_utils.topology import topology_problems

GROUPS = ("k8s_control_plane", "gpu_nodes")
_EXPECTED = "the playbooks act on the groups k8s_control_plane and gpu_nodes (inventory/example/hosts.yml shows them)"


def _missing_sources(sources):
    """The inventory sources given as paths (``-i``) that do not exist; a host list ("a,b,") is none."""
    return [source for source in sources or [] if "," not in source and not os.path.exists(source)]


def inventory_problems(groups, sources=(), flavour="k3s"):
    """Every problem of the inventory, one message each (empty when the playbooks have hosts).

    ``groups`` is Ansible's ``groups`` (group name -> hosts), ``sources`` its
    ``ansible_inventory_sources``, ``flavour`` the cluster's vgpu_kubernetes_flavour (without a cluster,
    flavour none, no control plane is needed).
    """
    missing = _missing_sources(sources)
    if missing:
        return [
            "inventory: %s does not exist; give the path of your inventory file or folder "
            "(make site INVENTORY=path/to/hosts.yml, ansible-playbook -i path/to/hosts.yml)" % source
            for source in missing
        ]
    needed = GROUPS if flavour != "none" else ("gpu_nodes",)
    others = sorted(name for name, hosts in groups.items() if hosts and name not in (*GROUPS, "all", "ungrouped"))
    problems = []
    for group in needed:
        if groups.get(group):
            continue
        close = difflib.get_close_matches(group, others, n=1, cutoff=0.7)
        hint = "; did you mean %s? (rename that group to %s)" % (close[0], group) if close else ""
        problems.append("inventory: the group %s has no host; %s%s" % (group, _EXPECTED, hint))
    return problems


class FilterModule(object):
    """The inventory check of vgpu.isolation."""

    def filters(self):
        return {"inventory_problems": inventory_problems, "topology_problems": topology_problems}
