"""Roles reach only down (issue 26 item 5): a role includes, imports or depends on roles of a lower
layer, never on one above it, so a role can be used (and changed) without the roles that build on it.

The layers, lowest first: `vgpu` (the settings and what several roles share: bundle packages, the
Kubernetes client, kube-scheduler's wiring to the extender, the unit-change rule); the node roles
(`preflight`, `offline_bundle`, `nvidia_driver`, `nvidia_container_runtime`, `vgpu_interposer`); the
cluster roles (`k3s`, `kubeadm`); the GPU stack on a cluster (`vgpu_stack`). The playbooks sit above
them all. A role that reached up (k3s or kubeadm including vgpu_stack's scheduler configuration,
preflight its unit-change check) would pull the upper role's defaults into a run that never asked
for that role, and break when the upper role changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from role_render import ROOT

LAYERS = {
    "vgpu": 0,
    "preflight": 1,
    "offline_bundle": 1,
    "nvidia_driver": 1,
    "nvidia_container_runtime": 1,
    "vgpu_interposer": 1,
    "k3s": 2,
    "kubeadm": 2,
    "vgpu_stack": 3,
}
PREFIX = "vgpu.isolation."
ROLES = sorted(path.name for path in (ROOT / "roles").iterdir() if (path / "meta").is_dir())


def _tasks_using_roles(node: Any):
    """Every include_role/import_role argument block anywhere in a task file (blocks, rescue, always)."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks_using_roles(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                yield value
            else:
                yield from _tasks_using_roles(value)


def roles_used_by(role: str) -> list[tuple[str, str]]:
    """(file, role name) for each role this role includes, imports or depends on."""
    used = []
    base = ROOT / "roles" / role
    for path in sorted((base / "tasks").glob("*.yml")) + sorted((base / "handlers").glob("*.yml")):
        for args in _tasks_using_roles(yaml.safe_load(path.read_text())):
            used.append((str(path.relative_to(ROOT)), args["name"]))
    meta = yaml.safe_load((base / "meta" / "main.yml").read_text()) or {}
    for dependency in meta.get("dependencies") or []:
        name = dependency["role"] if isinstance(dependency, dict) else dependency
        used.append((f"roles/{role}/meta/main.yml", name))
    return used


def test_every_role_has_a_layer():
    """A new role must be placed in a layer before the rule below can hold for it."""
    assert sorted(LAYERS) == ROLES


def reaches_up(role: str, name: str) -> bool:
    """Whether `role` using `name` breaks the rule: a name outside the collection, or another of its
    roles that is not of a lower layer (an unknown one counts as not lower)."""
    if not name.startswith(PREFIX):
        return True
    used = name.removeprefix(PREFIX)
    return used != role and LAYERS.get(used, LAYERS[role]) >= LAYERS[role]


@pytest.mark.parametrize("role", ROLES)
def test_a_role_uses_only_roles_below_it(role):
    """The names are the collection's own (vgpu.isolation.<role>) and each is of a lower layer."""
    reaching_up = [f"{where} uses {name}" for where, name in roles_used_by(role) if reaches_up(role, name)]
    assert reaching_up == [], f"{role} (layer {LAYERS[role]}) must use only roles of a lower layer"


def test_the_rule_finds_an_include_in_a_block(tmp_path: Path):
    """The walker sees an include_role nested in a block, as the roles write them (the test can fail)."""
    tasks = [{"block": [{"name": "x", "ansible.builtin.include_role": {"name": "vgpu.isolation.vgpu_stack"}}]}]
    assert [args["name"] for args in _tasks_using_roles(tasks)] == ["vgpu.isolation.vgpu_stack"]
