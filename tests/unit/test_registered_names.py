"""Facts the playbooks and roles register or set are no settings, and the settings are checked
before any of them exist.

The vgpu role checks every variable a host has against the collection's variables (typos are found
that way), and a registered or set fact becomes a host variable for the plays after it: one the
check met would stop the next play with "not a variable of vgpu.isolation" (site.yml met this on
the e2e node when playbooks/node.yml registered vgpu_node_kubeconfig). So the check runs once per
run, first (playbooks/check.yml at the head of every playbook an operator runs), and no fact may
take a setting's name (it would override the operator's value).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def settings() -> set[str]:
    spec = yaml.safe_load((ROOT / "roles/vgpu/meta/argument_specs.yml").read_text())["argument_specs"]
    return set(spec["settings"]["options"]) | set(spec["playbooks"]["options"])


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
    known = settings()
    files = sorted(
        [*ROOT.glob("playbooks/*.yml"), *ROOT.glob("roles/*/tasks/*.yml"), *ROOT.glob("roles/*/handlers/*.yml")]
    )
    assert files
    clashes = [f"{path.relative_to(ROOT)}: {name}" for path in files for name in fact_names(path) if name in known]
    assert clashes == []


# Playbooks an operator runs (the others are imported by these, or build the bundle on a connected machine).
ENTRY_PLAYBOOKS = ("site.yml", "stack.yml", "upgrade.yml", "verify.yml", "uninstall.yml")


def test_every_playbook_an_operator_runs_checks_the_inventory_and_the_settings_first() -> None:
    for name in ENTRY_PLAYBOOKS:
        first = yaml.safe_load((ROOT / "playbooks" / name).read_text())[0]
        assert first.get("ansible.builtin.import_playbook") == "check.yml", name
