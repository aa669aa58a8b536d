#!/usr/bin/python
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_download
short_description: Download Debian packages and their dependency closure into a folder
version_added: "0.1.0"
description:
  - Resolves the dependency closure of O(packages) as apt would install it on a bare system (a
    simulated C(apt-get install) against an empty package status, no recommends), so that among
    alternatives only apt's choice is taken; leaves out the packages marked essential (every Debian
    system has them), and downloads the candidate version of each package that O(dest) does not
    hold yet with C(apt-get download).
  - Used to build the offline bundle for air-gapped sites; the machine that runs it must use
    the same distribution release and apt sources as the nodes.
  - The packages are downloaded whether or not they are installed on this machine, so the folder
    is complete for a bare node.
options:
  packages:
    description:
      - Package names to download with their dependencies (Debian policy names, optionally C(:arch)).
      - A name that is not one is refused, so that no name can reach apt as an option.
    type: list
    elements: str
    required: true
  dest:
    description: Folder the C(.deb) files are written to; it must exist.
    type: path
    required: true
  recurse:
    description: Also download the dependencies of the dependencies, and so on.
    type: bool
    default: true
  exclude_essential:
    description: Leave out packages marked C(Essential) on this machine.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reports the packages it would download and downloads nothing.
  diff_mode:
    support: none
    description: Not supported.
  platform:
    support: full
    platforms: debian
    description: Debian and Ubuntu machines with apt.
author:
  - vgpu.isolation contributors (@vgpu-isolation)
"""

EXAMPLES = r"""
- name: Put the R470 driver and every dependency in the bundle
  vgpu.isolation.apt_download:
    packages: [nvidia-tesla-470-driver]
    dest: /srv/vgpu-bundle/driver
"""

RETURN = r"""
closure:
  description: Every package of the dependency closure, before essential and present ones are left out.
  returned: success
  type: list
  elements: str
  sample: [nvidia-tesla-470-driver, nvidia-tesla-470-kernel-dkms, dkms]
downloaded:
  description: The packages downloaded by this run (or that would be, in check mode).
  returned: success
  type: list
  elements: str
  sample: [nvidia-tesla-470-kernel-dkms]
"""

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

# Debian policy 5.6.1: a package name, optionally with an architecture (the candidate version is fetched).
PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?$")


def closure_of(module, packages, recurse):
    """The packages apt would install for ``packages`` on a bare system, named without architecture.

    apt resolves them against an empty package status, so the closure holds apt's own choice among
    alternatives (libsystemd0, not libelogind0, which would remove systemd from a node) and every
    dependency whatever this machine has installed. Without ``recurse``, the named packages alone.
    """
    if not recurse:
        return sorted({name.split(":", 1)[0] for name in packages})
    with tempfile.TemporaryDirectory(prefix="apt-download-") as tmp:
        status = os.path.join(tmp, "status")
        open(status, "w").close()
        cmd = [
            "apt-get",
            "install",
            "--simulate",
            "--no-install-recommends",
            "-o",
            "Dir::State::status=" + status,
            "-o",
            "Debug::NoLocking=1",
        ]
        # "--" ends apt's options: a name can never be read as one.
        rc, out, err = module.run_command([*cmd, "--", *packages])
    if rc != 0:
        module.fail_json(msg="apt could not resolve %s: %s" % (", ".join(packages), err.strip()), rc=rc)
    # "Inst libc6 (2.36-9+deb12u9 Debian:12.8/stable [amd64])"
    return sorted({line.split()[1].split(":", 1)[0] for line in out.splitlines() if line.startswith("Inst ")})


def essential_packages(module):
    rc, out, err = module.run_command(["dpkg-query", "-W", "-f", "${Package}\t${Essential}\n"])
    if rc != 0:
        module.fail_json(msg="dpkg-query failed: %s" % err.strip(), rc=rc)
    return {line.split("\t")[0] for line in out.splitlines() if line.endswith("\tyes")}


def present_packages(dest):
    """Package names of the .deb files already in dest (file names are name_version_arch.deb)."""
    return {name.split("_", 1)[0] for name in os.listdir(dest) if name.endswith(".deb")}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", required=True),
            dest=dict(type="path", required=True),
            recurse=dict(type="bool", default=True),
            exclude_essential=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    if not os.path.isdir(dest):
        module.fail_json(msg="dest: %s is not a folder; create it first" % dest)
    if not module.params["packages"]:
        module.fail_json(msg="packages: the list is empty; name at least one package")
    for name in module.params["packages"]:
        if not PACKAGE_NAME.match(name):
            module.fail_json(
                msg="packages: %r is not a Debian package name (lower-case letters, digits and + - . ,"
                " starting with a letter or digit, optionally :arch)" % name
            )

    closure = closure_of(module, module.params["packages"], module.params["recurse"])
    skip = present_packages(dest)
    if module.params["exclude_essential"]:
        skip |= essential_packages(module)
    wanted = [name for name in closure if name not in skip]

    if wanted and not module.check_mode:
        rc, _out, err = module.run_command(["apt-get", "download", "--", *wanted], cwd=dest)
        if rc != 0:
            module.fail_json(msg="apt-get download failed: %s" % err.strip(), rc=rc, wanted=wanted)
    module.exit_json(changed=bool(wanted), closure=closure, downloaded=wanted)


if __name__ == "__main__":
    main()
