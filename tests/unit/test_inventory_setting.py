"""files/site/inventory_setting.py: what `make site` reads from the inventory before a virtualenv or
Ansible exists (issue 25): the offline bundle, whose wheels build the site virtualenv, and whether
the component image is imported (built when missing) or pulled from a registry."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_SPEC = importlib.util.spec_from_file_location("inventory_setting", ROOT / "files" / "site" / "inventory_setting.py")
assert _SPEC and _SPEC.loader
inventory_setting = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(inventory_setting)


def test_a_literal_bundle_in_the_inventory_file(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text('all:\n  vars:\n    vgpu_offline_bundle_dir: "/srv/vgpu bundle"  # the bundle\n')
    assert inventory_setting.value(inventory, "vgpu_offline_bundle_dir") == "/srv/vgpu bundle"


def test_group_vars_beside_the_inventory_count_too(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("---\nvgpu_component_image_import: false\n")
    assert inventory_setting.value(inventory, "vgpu_component_image_import") == "false"
    assert inventory_setting.value(inventory, "vgpu_offline_bundle_dir") == ""


def test_the_example_inventory_names_no_bundle():
    assert inventory_setting.value(ROOT / "inventory" / "hosts.yml", "vgpu_offline_bundle_dir") == ""
    assert inventory_setting.value(ROOT / "tests" / "node" / "site-inventory.yml", "vgpu_offline_bundle_dir") == (
        "/srv/vgpu-bundle"
    )


def test_a_templated_value_is_refused_with_the_make_variable_that_gives_it(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  vars:\n    vgpu_offline_bundle_dir: \"{{ lookup('env', 'B') }}\"\n")
    with pytest.raises(SystemExit) as refused:
        inventory_setting.value(inventory, "vgpu_offline_bundle_dir")
    assert f"{inventory}: vgpu_offline_bundle_dir is templated" in str(refused.value)
    assert "`make ... BUNDLE=<value>`" in str(refused.value)
