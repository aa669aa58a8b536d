"""The README's first steps as a newcomer takes them (issue 41): copy inventory/example/, `make check`,
`make site`, from this checkout with an empty HOME, on a connected machine and on an air-gapped one.

These run make itself, with the inventory in a temporary folder outside the checkout (where
docs/first-run.md says to keep it) and HOME pointed at an empty folder. They use the site virtualenv
and the dependency collections the checkout already has (`make site` builds them when missing).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "inventory" / "example"
MAKE_ERROR = re.compile(r"^make(\[\d+\])?: \*\*\* ")


def copy_example(tmp_path: Path) -> Path:
    """README step 1: copy inventory/example/ (here outside the checkout)."""
    site = tmp_path / "mysite"
    shutil.copytree(EXAMPLE, site)
    return site / "hosts.yml"


def make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("ANSIBLE_", "MAKE", "VIRTUAL_ENV"))}
    env["HOME"] = str(home)
    # The .venv of the test run stays off PATH: make finds its own tools.
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    return subprocess.run(
        ["make", "-C", str(ROOT), "--no-print-directory", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )


def air_gapped(inventory: Path, bundle: Path) -> Path:
    """Switch the copied example to an air-gapped site as its comment says; returns the file changed."""
    all_yml = inventory.parent / "group_vars" / "all.yml"
    text = all_yml.read_text()
    assert "# vgpu_offline_bundle_dir: /srv/vgpu-bundle" in text
    all_yml.write_text(
        text.replace("# vgpu_offline_bundle_dir: /srv/vgpu-bundle", f"vgpu_offline_bundle_dir: {bundle}")
    )
    return all_yml


def test_the_example_is_a_connected_site_and_says_how_to_become_an_air_gapped_one():
    text = (EXAMPLE / "group_vars" / "all.yml").read_text()
    assert re.search(r"^vgpu_offline_bundle_dir:", text, re.MULTILINE) is None, "the example downloads what it needs"
    assert "connected" in text and "air-gapped" in text and "make bundle" in text


def test_a_missing_offline_bundle_is_named_with_its_setting_its_file_and_the_fix(tmp_path):
    """It died in the Makefile with `find: '/srv/vgpu-bundle/site/wheels': No such file or directory`."""
    inventory = copy_example(tmp_path)
    all_yml = air_gapped(inventory, tmp_path / "no-bundle")
    done = make(tmp_path, "check", f"INVENTORY={inventory}")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "find:" not in out and "No such file" not in out
    assert (
        f"{all_yml}: vgpu_offline_bundle_dir is {tmp_path / 'no-bundle'}, which is no offline bundle on this machine"
    ) in out, out
    assert "on a connected machine, remove that line" in out and "`make bundle`" in out


def test_a_folder_that_is_no_bundle_is_named_too(tmp_path):
    inventory = copy_example(tmp_path)
    (tmp_path / "empty").mkdir()
    all_yml = air_gapped(inventory, tmp_path / "empty")
    done = make(tmp_path, "check", f"INVENTORY={inventory}")
    assert done.returncode != 0
    assert f"{all_yml}: vgpu_offline_bundle_dir is {tmp_path / 'empty'}, which is no offline bundle" in done.stderr


def test_make_check_on_the_copied_example_ends_with_a_one_line_verdict_and_echoes_no_recipe(tmp_path):
    inventory = copy_example(tmp_path)
    done = make(tmp_path, "check", f"INVENTORY={inventory}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    verdicts = [line for line in lines if "check: 4 hosts, no problems found; nothing was changed" in line]
    assert len(verdicts) == 1, done.stdout
    assert "ansible-playbook -i" not in done.stdout, "make echoes no recipe without V=1"


def test_v_1_shows_the_recipes(tmp_path):
    done = make(tmp_path, "check", f"INVENTORY={copy_example(tmp_path)}", "V=1")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "ansible-playbook -i" in done.stdout


@pytest.mark.parametrize("target", ["site", "stack", "upgrade"])
def test_a_settings_mistake_stops_make_site_before_the_component_image_or_any_package(tmp_path, target):
    """`make site` built the component image (root, debootstrap) before the 3-second settings check.
    IMAGE_IMPORT=false keeps this test from building an image should the order regress."""
    inventory = copy_example(tmp_path)
    all_yml = inventory.parent / "group_vars" / "all.yml"
    all_yml.write_text(all_yml.read_text() + "vgpu_kubernetes_flavor: kubeadm\n")
    done = make(tmp_path, target, f"INVENTORY={inventory}", "IMAGE_IMPORT=false")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "did you mean vgpu_kubernetes_flavour?" in out, out[-3000:]
    assert "component image" not in out, "the image step came before the check"


@pytest.mark.parametrize("target", ["check", "site"])
def test_a_yaml_mistake_is_named_with_its_file_and_line_before_any_playbook_runs(tmp_path, target):
    """Issue 41 item 1: Ansible named neither the file nor the line of a YAML error in group_vars."""
    inventory = copy_example(tmp_path)
    all_yml = inventory.parent / "group_vars" / "all.yml"
    all_yml.write_text(all_yml.read_text() + "vgpu_sample_app_quota: [3GiB\n")
    done = make(tmp_path, target, f"INVENTORY={inventory}", "IMAGE_IMPORT=false")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"{all_yml}:" in out and "not valid YAML" in out, out[-3000:]
    assert "PLAY [" not in out, "a playbook ran before the YAML was read"


def test_make_help_lists_the_operator_s_targets_first():
    done = subprocess.run(
        ["make", "-C", str(ROOT), "--no-print-directory", "help"], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    targets = [line.split()[0] for line in lines if line.startswith("  ")]
    operator = ["check", "site", "verify", "stack", "upgrade", "uninstall", "image", "bundle"]
    assert targets[: len(operator)] == operator, lines
    assert lines[0].startswith("Operating a site") and any(line.startswith("Developing") for line in lines)
    assert "test" in targets[len(operator) :] and "unit" in targets[len(operator) :]


def test_make_check_on_the_example_switched_to_air_gapped_passes_with_a_bundle_there(tmp_path):
    """The site virtualenv and the collections exist here already, so the bundle's wheels are not read:
    this shows the switch the example describes passes make's bundle check and the settings check
    (a fresh clone with no network, `unshare -n`, built both from a bundle's site/wheels by hand)."""
    inventory = copy_example(tmp_path)
    (tmp_path / "bundle" / "site" / "wheels").mkdir(parents=True)
    air_gapped(inventory, tmp_path / "bundle")
    done = make(tmp_path, "check", f"INVENTORY={inventory}")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "check: 4 hosts, no problems found; nothing was changed" in done.stdout
