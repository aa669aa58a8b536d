"""What the nvidia_driver role leaves on a Debian 12 node (the container of this scenario).

The kernel module cannot load in a container, so these check the installed state only. The branch
comes from the scenario (VGPU_TEST_DRIVER_VERSION): nvidia_driver converges R470, nvidia_driver_535
the 535 LTS branch, both from Debian's own packages.
"""

import importlib
import os
import re
import sys
from pathlib import Path

import pytest
import yaml

DRIVER_VERSION = os.environ.get("VGPU_TEST_DRIVER_VERSION", "470.256.02")
BRANCH = DRIVER_VERSION.split(".")[0]
PACKAGES = [
    f"nvidia-tesla-{BRANCH}-driver",
    f"nvidia-tesla-{BRANCH}-kernel-dkms",
    f"nvidia-tesla-{BRANCH}-smi",
    f"libnvidia-tesla-{BRANCH}-cuda1",
    f"libnvidia-tesla-{BRANCH}-ml1",
]


def test_driver_packages_are_installed_at_the_pinned_version(host):
    for name in PACKAGES:
        package = host.package(name)
        assert package.is_installed, name
        assert package.version.startswith(DRIVER_VERSION + "-"), (name, package.version)


def test_driver_packages_are_held(host):
    selections = host.check_output("dpkg --get-selections " + " ".join(PACKAGES))
    held = {line.split()[0].split(":")[0] for line in selections.splitlines() if line.split()[-1] == "hold"}
    assert held == set(PACKAGES)


def test_apt_preferences_pin_the_version(host):
    pin = host.file("/etc/apt/preferences.d/vgpu-nvidia-driver")
    assert pin.contains(f"Pin: version {re.escape(DRIVER_VERSION)}-\\*")
    assert pin.contains("Pin-Priority: 1001")
    # apt itself agrees: the candidate stays at the pinned version.
    policy = host.check_output(f"apt-cache policy nvidia-tesla-{BRANCH}-driver")
    assert f"Candidate: {DRIVER_VERSION}-" in policy


def test_apt_upgrade_would_not_move_the_driver(host):
    simulation = host.check_output("apt-get -s upgrade")
    assert not any(f"Inst {name} " in simulation for name in PACKAGES)


def test_nouveau_is_blacklisted_for_modprobe_and_the_initramfs(host):
    blacklist = host.file("/etc/modprobe.d/vgpu-blacklist-nouveau.conf")
    assert blacklist.contains("^blacklist nouveau$")
    assert blacklist.contains("^options nouveau modeset=0$")
    # initramfs-tools copies /etc/modprobe.d into every initramfs it builds (hook "kmod" / modprobe config).
    assert host.package("initramfs-tools").is_installed
    assert host.exists("update-initramfs")


def test_dkms_built_the_module_for_the_debian_kernel(host):
    status = host.check_output("dkms status")
    line = rf"^nvidia\S*/{re.escape(DRIVER_VERSION)}, \S+-amd64, x86_64: installed"
    assert re.search(line, status, re.MULTILINE), status


def test_the_module_is_installed_under_debians_name(host):
    kernel = host.check_output("ls /lib/modules | grep -- -amd64 | sort -V | tail -n1")
    version = host.check_output(f"modinfo -k {kernel} -F version nvidia-tesla-{BRANCH}")
    assert version == DRIVER_VERSION


def other_branch_plan():
    """The nvidia_driver_535 scenario's plan for this node: the role's own planner, its settings."""
    root = Path(__file__).resolve().parents[3]
    # The collection as `make collection` installs it (the scenario's own run uses the same).
    sys.path.insert(0, str(root / ".collections"))
    plan = importlib.import_module("ansible_collections.vgpu.isolation.plugins.module_utils.nvidia_driver").plan

    scenario = yaml.safe_load((root / "molecule/nvidia_driver_535/molecule.yml").read_text())
    settings = scenario["provisioner"]["inventory"]["group_vars"]["all"]
    version = settings["vgpu_driver_version"]
    return version, plan(distro_id="debian", major="12", kernel="", branch=settings["vgpu_driver_branch"],
                         version=version)  # fmt: skip


@pytest.mark.skipif(BRANCH != "470", reason="the 535 scenario installs its branch itself")
def test_the_535_branch_resolves_in_debians_archive(host):
    """The 535 LTS branch's packages at their pinned version, with everything they depend on (the GSP
    firmware of non-free-firmware among it), resolve in Debian 12's archive: apt simulates the role's
    install on a system with nothing installed. Its DKMS build (8 minutes of both cores) runs in the
    nvidia_driver_535 scenario, outside make test (docs/testing.md)."""
    version, branch_plan = other_branch_plan()
    host.check_output("touch /tmp/vgpu-empty-status")
    specs = " ".join(f"'{spec}'" for spec in branch_plan["install_specs"])
    simulated = host.run(
        f"apt-get install -s --no-install-recommends -o Dir::State::status=/tmp/vgpu-empty-status {specs}"
    )
    assert simulated.rc == 0, simulated.stderr
    installs = dict(re.findall(r"^Inst (\S+) \((\S+) ", simulated.stdout, re.MULTILINE))
    for name in branch_plan["packages"]:
        assert installs.get(name, "").startswith(version + "-"), (name, installs.get(name))
    firmware = [name for name in installs if re.fullmatch(r"firmware-nvidia\S*-gsp", name)]
    assert firmware, sorted(installs)
    assert all(installs[name].startswith(version + "-") for name in firmware), firmware
