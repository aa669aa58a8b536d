"""Facts the playbooks and roles register or set are no settings.

The vgpu role checks every host variable that starts with vgpu_ against its settings (typos are
found that way), and a registered or set fact becomes a host variable for the plays after it: one
named like a setting stops the next play with "not a vgpu.isolation setting". site.yml met this on
the e2e node (playbooks/node.yml registered vgpu_node_kubeconfig). Internal names start with __,
or with a prefix the settings check leaves to its role (roles/vgpu/vars/main.yml).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def owned_prefixes() -> list[str]:
    return yaml.safe_load((ROOT / "roles/vgpu/vars/main.yml").read_text())["vgpu_owned_prefixes"]


def settings() -> set[str]:
    spec = yaml.safe_load((ROOT / "roles/vgpu/meta/argument_specs.yml").read_text())
    return set(spec["argument_specs"]["settings"]["options"])


def tasks(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always"):
            yield from tasks(node.get(key))


def fact_names(path: Path) -> Iterator[str]:
    for task in tasks(yaml.safe_load(path.read_text())):
        if isinstance(task.get("register"), str):
            yield task["register"]
        for module in ("ansible.builtin.set_fact", "set_fact"):
            if isinstance(task.get(module), dict):
                yield from (k for k in task[module] if k != "cacheable")


def test_no_registered_or_set_fact_is_named_like_a_setting() -> None:
    owned, known = owned_prefixes(), settings()
    files = sorted(
        [*ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml")]
    )
    assert files
    clashes = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in fact_names(path)
        if name.startswith("vgpu_") and not name.startswith(tuple(owned)) and name not in known
    ]
    assert clashes == []
