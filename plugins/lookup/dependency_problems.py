# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collections vgpu.isolation depends on, checked before anything changes.

A tarball installed with ``ansible-galaxy collection install --no-deps`` (the only way without
Galaxy) ran site.yml until the first kubernetes.core task, after the nodes had changed.
playbooks/check.yml asks this lookup first: each dependency of the collection's own metadata
(MANIFEST.json of an installed tarball, galaxy.yml of a checkout) that Ansible cannot find, or finds
at a version outside the range asked for, is one line naming it and the command that installs it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: dependency_problems
version_added: 0.1.0
short_description: The collections vgpu.isolation depends on that are missing or too old
description:
  - Reads the dependencies of vgpu.isolation (its C(MANIFEST.json), or C(galaxy.yml) in a checkout) and looks
    each one up where Ansible finds collections; returns one line per dependency that is missing or whose
    version is outside the range, with the C(ansible-galaxy) command that installs it.
author:
  - vgpu.isolation maintainers (@vgpu-isolation)
options: {}
"""

EXAMPLES = r"""
problems: "{{ lookup('vgpu.isolation.dependency_problems') }}"
"""

RETURN = r"""
_raw:
  description: One list, a line per missing or too old collection; empty when all are in place.
  type: list
  elements: list
"""

import importlib.util
import json
import os

import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
from ansible.plugins.lookup import LookupBase

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dependencies(root=COLLECTION_ROOT):
    """{collection: version range} as the collection's metadata states them."""
    manifest = os.path.join(root, "MANIFEST.json")
    if os.path.isfile(manifest):
        with open(manifest, encoding="utf-8") as stream:
            return json.load(stream)["collection_info"].get("dependencies") or {}
    with open(os.path.join(root, "galaxy.yml"), encoding="utf-8") as stream:
        return yaml.safe_load(stream).get("dependencies") or {}


def installed_version(name):
    """The version of an installed collection Ansible would load, "*" when it states none, None when absent."""
    try:
        spec = importlib.util.find_spec("ansible_collections.%s" % name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        manifest = os.path.join(folder, "MANIFEST.json")
        if os.path.isfile(manifest):
            with open(manifest, encoding="utf-8") as stream:
                return json.load(stream)["collection_info"].get("version") or "*"
    return "*"


def dependency_problems(wanted, found):
    """One line per dependency of ``wanted`` ({name: range}) that ``found`` ({name: version or None}) lacks."""
    problems = []
    for name, requirement in sorted(wanted.items()):
        version = found.get(name)
        asked = "%s:%s" % (name, requirement) if requirement not in ("*", "") else name
        if version is None:
            problems.append(
                "collection %s (%s) is not installed, and vgpu.isolation needs it; install it before the run: "
                "ansible-galaxy collection install '%s' (offline: from its tarball, or `make bundle`'s site/ "
                "folder)" % (name, requirement, asked)
            )
        elif version != "*" and not meets_requirements(version, requirement):
            problems.append(
                "collection %s is %s, and vgpu.isolation needs %s; upgrade it: ansible-galaxy collection install "
                "--upgrade '%s'" % (name, version, requirement, asked)
            )
    return problems


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        wanted = dependencies()
        return [dependency_problems(wanted, {name: installed_version(name) for name in wanted})]
