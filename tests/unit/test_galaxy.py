"""galaxy.yml's metadata (issue 14 item 7): no made-up addresses, and every collection the roles and
playbooks call is declared as a dependency, so `ansible-galaxy collection install` brings it."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
# Modules, action groups, roles and filters called by their fully qualified name.
FQCN = re.compile(
    r"^\s*(?:- )?([a-z]+)\.([a-z_]+)\.[a-z_0-9]+:\s*$"  # a task: "  kubernetes.core.k8s:"
    r"|group/([a-z]+)\.([a-z_]+)\."  # module_defaults: "group/kubernetes.core.k8s:"
    r"|\|\s*([a-z]+)\.([a-z_]+)\.[a-z_0-9]+",  # a filter: "| vgpu.isolation.mib"
    re.MULTILINE,
)


def used_collections():
    used = set()
    for path in [*ROOT.glob("roles/**/*.yml"), *ROOT.glob("playbooks/*.yml")]:
        for groups in FQCN.findall(path.read_text()):
            ns, name = [part for part in groups if part][:2]
            used.add(f"{ns}.{name}")
    return used - {"ansible.builtin", "vgpu.isolation"}


def test_no_placeholder_addresses_or_authors():
    text = (ROOT / "galaxy.yml").read_text()
    assert "example.invalid" not in text and "example.com" not in text
    for key in ("repository", "documentation", "issues", "homepage"):
        assert GALAXY.get(key) is None or not re.search(r"example|localhost", GALAXY[key]), key
    assert GALAXY["authors"] and all(author.strip() for author in GALAXY["authors"])


def test_every_collection_the_roles_call_is_a_dependency():
    used = used_collections()
    assert {"kubernetes.core", "community.general", "community.crypto", "ansible.posix"} <= used, used
    assert used <= set(GALAXY["dependencies"]), used - set(GALAXY["dependencies"])
