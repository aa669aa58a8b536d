"""One settings schema (issue 26 item 1, issue 39): every role's argument spec is the home of its
variables' types, defaults and docs, and everything that repeats a default is checked against it.

roles/vgpu's defaults, argument spec and the tables of docs/variables.md are generated from the
contract (contract/contract.yml; tests/unit/test_contract.py fails when one is stale), so the tests
here hold what is written by hand:
- each other role's defaults/main.yml against its meta/argument_specs.yml (names, values, types);
- the vgpu_* settings other roles redeclare in their specs against roles/vgpu's;
- the defaults the playbooks repeat (`vgpu_x | default(...)`) against roles/vgpu's;
- the components' config.DEFAULTS against the ConfigMap vgpu_stack renders from its defaults;
- the pinned versions written elsewhere (files/bundle/versions.env, the support matrix, the
  example inventory, the molecule driver test) against the settings.

The schema is read by the collection's own lookup (plugins/lookup/settings_schema.py), as the
settings check reads it.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.lookup.settings_schema import load
from ansible_collections.vgpu.isolation.plugins.module_utils import platforms
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import SETTINGS as CONTRACT_SETTINGS
from role_render import ROOT, render

SCHEMA = load(str(ROOT))["roles"]
SETTINGS = SCHEMA["vgpu"]["entry_points"]["settings"]
# roles/vgpu's literal defaults, as the contract states them (its defaults file wraps most of them in
# a fallback to the setting's old name, read for one release).
DEFAULTS = {name: entry["default"] for name, entry in CONTRACT_SETTINGS.items() if entry["default"] is not None}
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
_REFERENCE = re.compile(r"^\{\{\s*([a-z_][a-z0-9_]*)\s*\}\}$")
_TYPES: dict[str, Any] = {
    "str": str,
    "path": str,
    "int": int,
    "float": (int, float),
    "bool": bool,
    "list": list,
    "dict": dict,
}


def resolve(role: str, value: Any) -> tuple[str, Any]:
    """How a default is given, and its value: ("literal", value); ("reference", value) for a plain
    reference to another default ("{{ vgpu_x }}"), followed to its value; ("computed", None) for a
    template that computes more than a name."""
    kind = "literal"
    for _step in range(5):
        if "{{" not in repr(value):
            return kind, value
        match = _REFERENCE.match(value.strip()) if isinstance(value, str) else None
        if not match:
            return "computed", None
        kind, name = "reference", match.group(1)
        if name in SCHEMA[role]["defaults"]:
            value = SCHEMA[role]["defaults"][name]
        elif name in DEFAULTS:
            value = DEFAULTS[name]
        else:
            return "computed", None
    return "computed", None


def options_of(role: str) -> dict[str, list[tuple[str, dict]]]:
    """Every option of a role: name -> [(entry point, its spec)]."""
    found: dict[str, list[tuple[str, dict]]] = {}
    for entry, options in SCHEMA[role]["entry_points"].items():
        for name, option in options.items():
            found.setdefault(name, []).append((entry, option))
    return found


ROLES = sorted(SCHEMA)
# roles/vgpu's defaults and spec are generated from the contract, which states each default once.
HAND_WRITTEN_ROLES = [role for role in ROLES if role != "vgpu"]


@pytest.mark.parametrize("role", ROLES)
def test_every_default_of_a_role_is_documented_in_its_argument_spec(role):
    """A default without a spec entry has no type and no docs (ansible-doc -t role shows nothing)."""
    undocumented = sorted(set(SCHEMA[role]["defaults"]) - set(options_of(role)))
    assert undocumented == [], f"roles/{role}/defaults/main.yml: not in meta/argument_specs.yml: {undocumented}"


@pytest.mark.parametrize("role", HAND_WRITTEN_ROLES)
def test_the_spec_defaults_are_the_defaults_the_role_uses(role):
    """nvidia_container_runtime_version was 1.20.2 in defaults/main.yml and 1.17.8 in its spec.

    A literal default is written in the spec too; a default that only names another variable
    ("{{ vgpu_x }}") may instead say so in its description; a computed one has no spec default.
    """
    drift = []
    for name, entries in options_of(role).items():
        if name in SCHEMA[role]["defaults"]:
            kind, value = resolve(role, SCHEMA[role]["defaults"][name])
            raw = SCHEMA[role]["defaults"][name]
        elif name in DEFAULTS:  # a setting of roles/vgpu the role's spec documents as its input
            kind, value = resolve("vgpu", DEFAULTS[name])
            raw = DEFAULTS[name]
        else:
            continue
        for entry, option in entries:
            has = "default" in option
            if kind == "computed" and has:
                drift.append(f"{entry}.{name}: the spec says {option['default']!r}, the default is computed")
            elif kind != "computed" and has and option["default"] != value:
                drift.append(f"{entry}.{name}: the spec says {option['default']!r}, the role uses {value!r}")
            elif kind == "literal" and not has and value not in (None, "", [], {}):
                drift.append(f"{entry}.{name}: the spec has no default, the role's is {value!r}")
            elif kind == "reference" and not has:
                referenced = str(raw).strip("{} ")
                if referenced not in str(option.get("description")):
                    drift.append(f"{entry}.{name}: the description does not say it defaults to {referenced}")
    assert drift == [], f"roles/{role}: " + "; ".join(drift)


@pytest.mark.parametrize("role", HAND_WRITTEN_ROLES)
def test_each_literal_default_has_its_spec_type(role):
    wrong = []
    for name, entries in options_of(role).items():
        kind, value = resolve(role, SCHEMA[role]["defaults"].get(name, DEFAULTS.get(name)))
        if kind == "computed" or value is None:
            continue
        for entry, option in entries:
            python_type = _TYPES.get(option.get("type", "str"))
            if python_type is None:  # raw
                continue
            if not isinstance(value, python_type) or (python_type is int and isinstance(value, bool)):
                wrong.append(f"{entry}.{name}: {value!r} is not of type {option.get('type', 'str')}")
            if option.get("choices") and not isinstance(value, list) and value not in option["choices"]:
                wrong.append(f"{entry}.{name}: {value!r} is not one of its choices {option['choices']}")
    assert wrong == [], f"roles/{role}: " + "; ".join(wrong)


def test_the_settings_other_roles_declare_are_roles_vgpu_s():
    """A role may list the settings it reads in its own spec (ansible-doc shows them there); each
    must say what roles/vgpu says."""
    drift = []
    for role in ROLES:
        if role == "vgpu":
            continue
        for name, entries in options_of(role).items():
            if name not in SETTINGS:
                continue
            for entry, option in entries:
                for key in ("type", "default", "choices", "elements"):
                    if option.get(key) != SETTINGS[name].get(key):
                        drift.append(
                            f"roles/{role} {entry}.{name}.{key}: {option.get(key)!r}, "
                            f"roles/vgpu: {SETTINGS[name].get(key)!r}"
                        )
    assert drift == []


# --- the playbooks' own fallbacks -------------------------------------------------------------
_FALLBACK = re.compile(r"\b(vgpu_[a-z0-9_]+) \| default\(([^()]*)\)")


def test_the_defaults_playbooks_repeat_are_the_settings_defaults():
    """Plays without the vgpu role (the flavour grouping) fall back to a default themselves."""
    declared = {**DEFAULTS, **{n: o["default"] for n, o in SCHEMA["vgpu"]["entry_points"]["playbooks"].items()}}
    wrong = []
    for path in sorted((ROOT / "playbooks").glob("*.yml")):
        for name, fallback in _FALLBACK.findall(path.read_text()):
            if name in declared and yaml.safe_load(fallback) != declared[name]:
                wrong.append(f"{path.name}: {name} | default({fallback}), roles/vgpu: {declared[name]!r}")
    assert wrong == []


# --- the pinned versions written elsewhere ---------------------------------------------------
def versions_env() -> dict[str, str]:
    pairs = {}
    for line in (ROOT / "files" / "bundle" / "versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            pairs[key.strip()] = value.strip()
    return pairs


def test_the_offline_bundle_builds_the_versions_the_roles_install():
    """files/bundle/versions.env pins what `make bundle` builds from source."""
    env = versions_env()
    toolkit = SCHEMA["nvidia_container_runtime"]["defaults"]["nvidia_container_runtime_version"]
    assert env["TOOLKIT_VERSION"] == "v" + toolkit
    assert env["K8S_VERSION"] == "v" + DEFAULTS["vgpu_kubernetes_version"]


def test_both_flavours_default_to_the_same_kubernetes_release():
    """Issue 25 item 7: K3s defaulted to v1.31.4, kubeadm to 1.36.3 (and DRA needs 1.36)."""
    assert DEFAULTS["vgpu_k3s_version"].split("+")[0] == "v" + DEFAULTS["vgpu_kubernetes_version"]


def test_the_default_driver_is_the_support_matrix_s_entry_for_its_branch():
    branch = platforms.BRANCHES[DEFAULTS["vgpu_driver_branch"]]
    assert (branch["version"], branch["cuda"]) == (DEFAULTS["vgpu_driver_version"], DEFAULTS["vgpu_cuda_version"])


def test_the_example_inventory_and_the_molecule_driver_test_name_the_default_driver():
    example = yaml.safe_load((ROOT / "inventory" / "example" / "group_vars" / "gpu_nodes.yml").read_text())
    assert (example["vgpu_driver_branch"], example["vgpu_driver_version"]) == (
        DEFAULTS["vgpu_driver_branch"],
        DEFAULTS["vgpu_driver_version"],
    )
    molecule = (ROOT / "molecule" / "nvidia_driver" / "tests" / "test_driver.py").read_text()
    assert f'"VGPU_TEST_DRIVER_VERSION", "{DEFAULTS["vgpu_driver_version"]}"' in molecule
    readme = (ROOT / "roles" / "nvidia_driver" / "README.md").read_text()
    assert f"by default `{DEFAULTS['vgpu_driver_version']}`" in readme


def test_the_component_image_is_tagged_with_the_collection_version():
    assert DEFAULTS["vgpu_component_image"].rsplit(":", 1)[1] == GALAXY["version"]


# --- the components' defaults ----------------------------------------------------------------
from vgpu_components import config as component_config  # noqa: E402

# Where the rendered ConfigMap differs from config.DEFAULTS on purpose, and why.
INTENDED = {
    ("extender", "tls_cert_file"): "the role turns on mutual TLS (vgpu_extender_tls)",
    ("extender", "tls_key_file"): "the role turns on mutual TLS (vgpu_extender_tls)",
    ("extender", "client_ca_file"): "the role turns on mutual TLS (vgpu_extender_tls)",
    ("device_plugin", "mps_pinned_memory_limit"): "the default driver branch, 470, has no CUDA 11.5",
}


def flatten(tree: dict, path: tuple = ()) -> dict[tuple, Any]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and key != "switches":
            out.update(flatten(value, (*path, key)))
        else:
            out[(*path, key)] = value
    return out


def test_the_configmap_vgpu_stack_renders_from_its_defaults_is_config_defaults(tmp_path):
    rendered = render(tmp_path, {"vgpu_kubernetes_flavour": "kubeadm"})
    (config_map,) = [d for d in rendered["components.yaml"] if d["metadata"]["name"] == "vgpu-config"]
    config = flatten(yaml.safe_load(config_map["data"]["config.yaml"]))
    expected = flatten(component_config.DEFAULTS)
    unknown = sorted(set(config) - set(expected))
    assert unknown == [], "rendered keys config.py does not know"
    drift = [
        f"{'.'.join(key)}: rendered {value!r}, config.DEFAULTS {expected[key]!r}"
        for key, value in sorted(config.items())
        if key not in INTENDED and value != expected[key]
    ]
    assert drift == []
