# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The schema of every variable of vgpu.isolation, read from the roles themselves.

Each role's ``meta/argument_specs.yml`` is the home of its variables' types, defaults and docs;
``defaults/main.yml`` holds the values Ansible uses and ``vars/main.yml`` the derived ones.
roles/vgpu's entry point ``settings`` holds the settings of docs/variables.md, its entry point
``playbooks`` the variables the playbooks read. tests/unit/test_settings_schema.py keeps the
defaults, the argument specs and docs/variables.md equal; the settings check (plugins/filter/settings.py)
takes the names known here as the list a typo is compared with.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: settings_schema
version_added: 0.1.0
short_description: The variables of every role of vgpu.isolation
description:
  - Reads each role's C(meta/argument_specs.yml), C(defaults/main.yml) and C(vars/main.yml) from the
    installed collection and returns them as one dictionary.
  - The settings check of the C(vgpu) role compares the names an inventory sets with these, so a
    misspelt role variable is refused with the nearest known name.
author:
  - vgpu.isolation maintainers (@vgpu-isolation)
options: {}
"""

EXAMPLES = r"""
schema: "{{ lookup('vgpu.isolation.settings_schema') }}"
"""

RETURN = r"""
_raw:
  description:
    - One dictionary, C(roles), mapping each role name to its C(defaults), C(vars) and C(entry_points)
      (each entry point's options as its argument spec writes them), and C(old_names), the names renamed or
      retired since the last release, which the settings check accepts for one release.
  type: list
  elements: dict
"""

import os

import yaml
from ansible.plugins.lookup import LookupBase
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import OLD_NAMES, RETIRED

# This file is plugins/lookup/settings_schema.py of the collection: the roles are two folders up.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# libyaml's parser where PyYAML has it: every task that reads the settings schema parses all
# the roles' files again, ten times faster with it.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read(path):
    if not os.path.isfile(path):
        return {}
    with open(path) as handle:
        return yaml.load(handle, Loader=_LOADER) or {}  # noqa: S506 - a safe loader, C or Python


def load(root=COLLECTION_ROOT):
    """{"roles": {role: {"defaults": {...}, "vars": {...}, "entry_points": {entry: options}}}}."""
    roles = {}
    roles_dir = os.path.join(root, "roles")
    for name in sorted(os.listdir(roles_dir)):
        role = os.path.join(roles_dir, name)
        specs = _read(os.path.join(role, "meta", "argument_specs.yml")).get("argument_specs") or {}
        roles[name] = {
            "defaults": _read(os.path.join(role, "defaults", "main.yml")),
            "vars": _read(os.path.join(role, "vars", "main.yml")),
            "entry_points": {entry: body.get("options") or {} for entry, body in specs.items()},
        }
    # The names renamed or retired since the last release (contract/contract.yml): read for one release.
    return {"roles": roles, "old_names": sorted(set(OLD_NAMES) | set(RETIRED))}


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [load()]
