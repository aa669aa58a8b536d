"""Generate every table the media read from the contract, contract/contract.yml (docs/architecture.md,
"Decision: one contract, generated into every medium").

    python contract/generate.py           write the generated files that differ from a fresh generation
    python contract/generate.py --check   write nothing; exit 1 naming each stale file (make lint)

An output is a whole file, which starts with a "generated from ... do not edit" line, or a block of a
file with hand-written parts, between a ">>> generated" and a "<<< generated" marker line. The
contract is checked first: a mistake in it is one line naming the entry and what is expected.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = "contract/contract.yml"
GENERATOR = "contract/generate.py"
BY = f"generated from {CONTRACT} by {GENERATOR} (make generate): do not edit"
SCOPES = ("cluster", "node", "run")
TYPES = ("str", "int", "bool", "raw", "list", "dict", "path", "float")
SETTING_KEYS = {
    "section", "type", "elements", "choices", "default", "shown", "scope", "why", "old_names", "doc",
    "min", "max", "size", "form", "only", "why_only", "prefix", "switches",
}  # fmt: skip
RULE_KEYS = ("min", "max", "above", "choices", "only", "why_only", "size", "form", "prefix", "switches")
CONFIG_KEYS = {"setting", "from", "default", "type", "render", "render_if", "used_by", "doc", *RULE_KEYS}
SECTIONS_OF_CONFIG = ("device_plugin", "monitor", "mps", "extender", "dra")
# The sections of docs/variables.md whose table is generated, in the page's order.
DOC_SECTIONS = (
    "Cluster",
    "Driver",
    "GPU memory sharing",
    "Tenant pods",
    "The components' host paths, ports and logs",
    "kube-scheduler and the extender",
    "Playbook variables",
)


class ContractError(ValueError):
    """A mistake in the contract: the message names the entry and what is expected."""


# ---- reading and checking the contract ----------------------------------------------------------


def load(root: Path = ROOT) -> dict[str, Any]:
    contract = yaml.safe_load((root / CONTRACT).read_text(encoding="utf-8"))
    check(contract)
    return contract


def check(contract: dict[str, Any]) -> None:
    settings = contract["settings"]
    for name, entry in settings.items():
        _check_setting(name, entry)
    olds = [old for entry in settings.values() for old in entry.get("old_names", [])]
    for old in olds:
        if olds.count(old) > 1 or old in settings:
            raise ContractError(f"settings: old name {old} is a setting or the old name of two settings")
    for key, entry in contract["config"].items():
        _check_config_key(key, entry, settings)


def _check_setting(name: str, entry: dict[str, Any]) -> None:
    where = f"settings.{name}"
    unknown = set(entry) - SETTING_KEYS
    if unknown:
        raise ContractError(f"{where}: unknown keys {sorted(unknown)}; expected some of {sorted(SETTING_KEYS)}")
    for key in ("section", "type", "scope", "doc"):
        if key not in entry:
            raise ContractError(f"{where}: has no {key}")
    if entry["section"] not in DOC_SECTIONS:
        raise ContractError(f"{where}: section {entry['section']!r} is none of {DOC_SECTIONS}")
    if entry["type"] not in TYPES:
        raise ContractError(f"{where}: type {entry['type']!r} is none of {TYPES}")
    if entry["scope"] not in SCOPES:
        raise ContractError(f"{where}: scope {entry['scope']!r} is none of {SCOPES}")
    if entry["scope"] == "cluster" and not entry.get("why"):
        raise ContractError(f"{where}: a cluster-wide setting says why (why:)")
    if "size" in entry and entry["type"] != "raw":
        raise ContractError(f"{where}: a memory size has type raw (an int or a string with a suffix)")
    if "only" in entry and not entry.get("why_only"):
        raise ContractError(f"{where}: a setting with only one working value says why (why_only:)")
    if "default" not in entry:
        raise ContractError(f"{where}: has no default")
    if computed(entry["default"]) and not entry.get("shown"):
        raise ContractError(f"{where}: a computed default says how the docs show it (shown:)")
    _check_default(where, entry)


def _check_default(where: str, entry: dict[str, Any]) -> None:
    python_type = _PYTHON_TYPES.get(entry["type"])
    literal = entry["default"]
    if python_type and not computed(literal) and literal != "switches" and not _is(literal, python_type):
        raise ContractError(f"{where}: default {literal!r} is not of type {entry['type']}")
    if "choices" in entry and not computed(literal):
        for item in literal if isinstance(literal, list) else [literal]:
            if item not in entry["choices"]:
                raise ContractError(f"{where}: default {item!r} is not one of its choices {entry['choices']}")


_PYTHON_TYPES: dict[str, type | tuple[type, ...]] = {
    "str": str,
    "path": str,
    "int": int,
    "float": (int, float),
    "bool": bool,
    "list": list,
    "dict": dict,
}


def _is(value: Any, python_type: type | tuple[type, ...]) -> bool:
    return isinstance(value, python_type) and not (python_type is int and isinstance(value, bool))


def _check_config_key(key: str, entry: dict[str, Any], settings: dict[str, Any]) -> None:
    where = f"config.{key}"
    unknown = set(entry) - CONFIG_KEYS
    if unknown:
        raise ContractError(f"{where}: unknown keys {sorted(unknown)}; expected some of {sorted(CONFIG_KEYS)}")
    section = key.rpartition(".")[0]
    if section and section not in SECTIONS_OF_CONFIG:
        raise ContractError(f"{where}: section {section!r} is none of {SECTIONS_OF_CONFIG}")
    sources = [k for k in ("setting", "from", "default") if k in entry]
    if len(sources) != 1:
        raise ContractError(f"{where}: give exactly one of setting, from or default (got {sources or 'none'})")
    if "setting" in entry and entry["setting"] not in settings:
        raise ContractError(f"{where}: setting {entry['setting']} is no setting of the contract")
    for name in re.findall(r"\{(\w+)\}", entry.get("from", "")):
        if name not in settings:
            raise ContractError(f"{where}: from names {name}, which is no setting of the contract")
    for name in ("used_by", "doc"):
        if name not in entry:
            raise ContractError(f"{where}: has no {name}")


def computed(default: Any) -> bool:
    return isinstance(default, str) and "{{" in default


# ---- values: the defaults and rules every medium reads --------------------------------------------


def setting_default(contract: dict[str, Any], name: str) -> Any:
    """A setting's literal default ({version} and `switches` filled in); None when Jinja computes it."""
    default = contract["settings"][name]["default"]
    if name == "vgpu_switches":
        return {s["key"]: s["default"] for s in contract["switches"]}
    if computed(default):
        return None
    if isinstance(default, str):
        return default.replace("{version}", str(contract["version"]))
    return default


def mib(value: Any) -> int:
    """A literal size of the contract in MiB (the contract's own defaults: plain numbers or <n>MiB)."""
    return int(str(value).removesuffix("MiB"))


def config_entry(contract: dict[str, Any], key: str) -> dict[str, Any]:
    """A key of the components' config with what it takes from its setting: its default and rules."""
    entry = dict(contract["config"][key])
    setting = contract["settings"].get(entry.get("setting", ""), {})
    rules = {k: setting[k] for k in RULE_KEYS if k in setting}
    rules.update({k: entry[k] for k in RULE_KEYS if k in entry})
    if "setting" in entry:
        default = setting_default(contract, entry["setting"])
        default = mib(default) if "size" in setting else default
    elif "from" in entry:
        default = re.sub(r"\{(\w+)\}", lambda m: str(setting_default(contract, m.group(1))), entry["from"])
    else:
        default = entry["default"]
    if entry.get("type") == "float":
        default = float(default)
    return {**entry, "default": default, "rules": rules, "setting_entry": setting}


def config_tree(contract: dict[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {section: {} for section in SECTIONS_OF_CONFIG}
    for key in contract["config"]:
        section, _dot, name = key.rpartition(".")
        (tree[section] if section else tree)[name] = config_entry(contract, key)["default"]
    return {k: tree[k] for k in [*[k for k in tree if k not in SECTIONS_OF_CONFIG], *SECTIONS_OF_CONFIG]}


def old_names(contract: dict[str, Any]) -> dict[str, str]:
    return {old: name for name, entry in contract["settings"].items() for old in entry.get("old_names", [])}


# ---- emitters: Python literals, YAML scalars, Jinja literals --------------------------------------


def py_str(text: str) -> str:
    """A string as ruff format writes it: double quotes, unless that needs more escapes."""
    if '"' in text and "'" not in text:
        return "'" + json.dumps(text)[1:-1].replace('\\"', '"') + "'"
    return json.dumps(text)


LINE = 120  # ruff's line length (pyproject.toml)


def py(value: Any, indent: int = 0, room: int = LINE) -> str:
    """A Python literal in ruff format's layout: containers one item a line, with trailing commas; a
    string too long for its line (`room` left after the indent) split into parts of a few words."""
    if isinstance(value, str):
        return py_str(value) if len(py_str(value)) <= room else _split(value, indent)
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, dict):
        return _py_dict(value, indent)
    if isinstance(value, (list, tuple)):
        return _py_sequence(value, indent)
    raise TypeError(f"no Python literal for {value!r}")


def _py_dict(value: dict[Any, Any], indent: int) -> str:
    if not value:
        return "{}"
    inner, items = " " * (indent + 4), []
    for k, v in value.items():
        head = f"{inner}{py(k)}: "
        items.append(f"{head}{py(v, indent + 4, LINE - len(head) - 1)},")
    return "{\n" + "\n".join(items) + f"\n{' ' * indent}}}"


def _py_sequence(value: list[Any] | tuple[Any, ...], indent: int) -> str:
    opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
    if not value:
        return opening + closing
    if len(value) == 1 and isinstance(value, tuple) and not isinstance(value[0], (dict, list, tuple)):
        return f"({py(value[0])},)"  # ruff keeps a one-tuple on its line
    inner = " " * (indent + 4)
    items = [f"{inner}{py(v, indent + 4, LINE - len(inner) - 1)}," for v in value]
    return opening + "\n" + "\n".join(items) + f"\n{' ' * indent}{closing}"


def _split(text: str, indent: int) -> str:
    inner = " " * (indent + 4)
    words = text.split(" ")
    parts, part = [], ""
    for word in words:
        if part and len(py_str(part + word + " ")) + len(inner) > LINE - 10:
            parts.append(part)
            part = ""
        part += word + " "
    parts.append(part[:-1])
    return "(\n" + "\n".join(inner + py_str(p) for p in parts) + f"\n{' ' * indent})"


def yaml_scalar(value: Any) -> str:
    """A value as YAML writes it in flow style, on one line."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1_000_000, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def yaml_quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def jinja(value: Any) -> str:
    """A value as a Jinja literal (the fallback of default())."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ", ".join(jinja(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{jinja(k)}: {jinja(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no Jinja literal for {value!r}")


def folded(key: str, text: str, indent: int, width: int = 110) -> list[str]:
    """key: >- with text wrapped at width (YAML folds the lines back into one)."""
    pad = " " * (indent + 2)
    lines = textwrap.wrap(" ".join(text.split()), width=width - len(pad), break_on_hyphens=False)
    return [f"{' ' * indent}{key}: >-", *(pad + line for line in lines)]


def shown(value: Any) -> str:
    """A default as the docs show it: YAML's spelling, quoted where YAML would read another type."""
    if isinstance(value, str) and (value == "" or not isinstance(yaml.safe_load(value), str)):
        return f'`"{value}"`'
    return f"`{yaml_scalar(value)}`"


def doc_line(text: str) -> str:
    return " ".join(str(text).split())


# ---- roles/vgpu -------------------------------------------------------------------------------------


def role_default(contract: dict[str, Any], name: str) -> str:
    """The default of a setting in defaults/main.yml: a literal, or Jinja; a setting with old names
    takes an old name's value first (for one release)."""
    entry = contract["settings"][name]
    literal = setting_default(contract, name)
    olds = entry.get("old_names", [])
    if not olds:
        return yaml_scalar(literal) if literal is not None or not computed(entry["default"]) else entry["default"]
    fallback = f"({_inner(entry['default'])})" if literal is None else jinja(literal)
    for old in reversed(olds):
        fallback = f"{old} | default({fallback})"
    return "{{ " + fallback + " }}"


def _inner(template: str) -> str:
    return " ".join(template.strip().removeprefix("{{").removesuffix("}}").split())


def defaults_yml(contract: dict[str, Any]) -> str:
    lines = [
        "---",
        f"# {BY}.",
        "# The default of every vgpu_* setting (docs/variables.md). Every other role depends on roles/vgpu,",
        "# so these reach all of them, and no role repeats a fallback for a vgpu_* setting. A setting that",
        "# had another name reads the old name first, for one release: the settings check names the new one.",
    ]
    for name, entry in contract["settings"].items():
        if entry["scope"] == "run":
            continue  # the playbooks' own: the argument spec's entry point `playbooks` says their defaults
        value = role_default(contract, name)
        if value.startswith("{{"):
            if len(name) + len(value) + 4 > 150:
                lines += folded(name, value, 0, width=120)
            else:
                lines.append(f"{name}: {yaml_quoted(value)}")
        else:
            lines.append(f"{name}: {value}")
    return "\n".join(lines) + "\n"


def spec_options(contract: dict[str, Any], scope_run: bool) -> str:
    """The options of roles/vgpu's argument spec: entry point `settings`, or `playbooks` (scope run)."""
    lines: list[str] = []
    for name, entry in contract["settings"].items():
        if (entry["scope"] == "run") != scope_run:
            continue
        literal = setting_default(contract, name)
        doc = doc_line(entry["doc"])
        if literal is None:
            doc += f". Default: {doc_line(entry['shown'])}"
        lines.append(f"      {name}:")
        lines += folded("description", doc, 8)
        lines.append(f"        type: {entry['type']}")
        for key in ("elements", "choices"):
            if key in entry:
                lines.append(f"        {key}: {yaml_scalar(entry[key])}")
        if literal is not None:
            lines.append(f"        default: {yaml_scalar(literal)}")
    return "\n".join(lines)


def names_vars(contract: dict[str, Any]) -> str:
    """roles/vgpu/vars' block: the names the templates compose, and the version."""
    names = contract["names"]
    prefix = "{{ vgpu_resource_prefix }}"
    lines = [
        "# The contract's names: what the templates compose resources, annotations and labels from.",
        f"vgpu_version: {yaml_scalar(str(contract['version']))}",
    ]
    for key, value in names["resources"].items():
        lines.append(f'vgpu_{key}_resource: "{prefix}/{value}"')
    for key, value in names["annotations"].items():
        lines.append(f'vgpu_{key}_annotation: "{prefix}/{value}"')
    for key, value in names["labels"].items():
        lines.append(f'vgpu_{key}_label: "{prefix}/{value}"')
    lines.append(f'vgpu_dra_driver: "{names["dra_driver"]}.{prefix}"')
    lines.append(f"vgpu_extender_address: {names['extender_address']}")
    lines.append(f"vgpu_config_file: {names['config_file']}")
    lines.append("vgpu_components:")
    for component in names["components"]:
        lines.append(f"  - {yaml_scalar(component)}")
    return "\n".join(lines)


# ---- the ConfigMap template ---------------------------------------------------------------------


def render_expression(contract: dict[str, Any], key: str) -> str | None:
    """How the ConfigMap renders a key, or None when it does not (the component's default applies)."""
    entry = config_entry(contract, key)
    if "render" in entry:
        return None if entry["render"] is False else str(entry["render"])
    if "from" in entry:
        return re.sub(r"\{(\w+)\}", r"{{ \1 }}", entry["from"])
    if "setting" not in entry:
        return None
    name, setting = entry["setting"], entry["setting_entry"]
    if "size" in setting:
        return f"{{{{ {name} | vgpu.isolation.mib('{name}', {setting['size']}) }}}}"
    return {
        "bool": "{{ %s | bool | lower }}",
        "int": "{{ %s | int }}",
    }.get(setting["type"], "{{ %s }}") % name


def config_template(contract: dict[str, Any]) -> str:
    lines = [
        f"{{# {BY} #}}",
        "# {{ ansible_managed }}",
        "# One file for all the components (docs/architecture.md; every key: files/components/README.md).",
    ]
    current_section, current_if = "", None
    for key in contract["config"]:
        expression = render_expression(contract, key)
        if expression is None:
            continue
        section, _dot, name = key.rpartition(".")
        condition = contract["config"][key].get("render_if")
        if condition != current_if and current_if is not None:
            lines.append("{% endif %}")
            current_if = None
        if section != current_section:
            lines.append(f"{section}:")
            current_section = section
        if condition != current_if:
            lines.append(f"{{% if {condition} %}}")
            current_if = condition
        pad = "  " if section else ""
        if config_entry(contract, key)["rules"].get("switches"):
            lines.append(f"{pad}{name}:")
            lines += [f"{pad}  {s['key']}: {{{{ {contract['config'][key]['setting']}['{s['key']}'] | int }}}}"
                      for s in contract["switches"]]  # fmt: skip
        else:
            lines.append(f"{pad}{name}: {expression}")
    if current_if is not None:
        lines.append("{% endif %}")
    return "\n".join(lines) + "\n"


# ---- Python: the collection's module_utils and the components' package ----------------------------

GPL = """\
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""


def sizes_py(contract: dict[str, Any]) -> list[str]:
    sizes = contract["sizes"]
    return [
        "# The size grammar (sizes): a suffix's MiB, the suffixes refused and why, the largest size.",
        f"SIZE_MIB_PER_SUFFIX = {py(sizes['mib_per_suffix'])}",
        f"SIZE_BELOW_MIB = {py(tuple(sizes['below_mib']))}",
        f"SIZE_DECIMAL = {py(tuple(sizes['decimal']))}",
        f"SIZE_MAX_MIB = {sizes['max_mib']}",
        f"SIZE_EXPECTED = {py_str(sizes['expected'])}",
        "",
        "# The resource prefix (names.resource_prefix): its form, and the domain Kubernetes keeps.",
        f"PREFIX_DEFAULT = {py_str(contract['names']['resource_prefix']['default'])}",
        f"PREFIX_PATTERN = {py_str(contract['names']['resource_prefix']['pattern'])}",
        f"PREFIX_EXPECTED = {py_str(contract['names']['resource_prefix']['expected'])}",
        f"PREFIX_RESERVED_DOMAIN = {py_str(contract['names']['resource_prefix']['reserved_domain'])}",
        "",
        "# libvgpu's switches (switches): the quota file's key, the environment variable, default, bit.",
        "SWITCHES = " + py(tuple((s["key"], s["env"], s["default"], s["bit"]) for s in contract["switches"])),
    ]


def names_py(contract: dict[str, Any]) -> list[str]:
    names = contract["names"]
    return [
        f"VERSION = {py_str(str(contract['version']))}",
        "",
        "# The names (names): <prefix>/<name> each; the DRA driver is <dra_driver>.<prefix>.",
        f"RESOURCES = {py(names['resources'])}",
        f"ANNOTATIONS = {py(names['annotations'])}",
        f"LABELS = {py(names['labels'])}",
        f"DRA_DRIVER = {py_str(names['dra_driver'])}",
        f"COMPONENTS = {py(tuple(names['components']))}",
    ]


def module_utils_py(contract: dict[str, Any]) -> str:
    settings = {}
    for name, entry in contract["settings"].items():
        settings[name] = {k: v for k, v in entry.items() if k not in ("doc", "shown", "section", "default")}
        settings[name]["default"] = setting_default(contract, name)
    lines = [
        GPL.rstrip(),
        f'"""{BY}.',
        "",
        "The contract as the collection's plugins read it: the settings check (filter/settings.py), the size",
        'parser (memory_size.py), the cluster views (filter/cluster.py) and the settings lookup."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        *names_py(contract),
        "",
        *sizes_py(contract),
        "",
        "# Every setting (settings) but its docs: type, rules, scope, default (None: Jinja computes it).",
        f"SETTINGS: dict[str, dict[str, Any]] = {py(settings)}",
        "# Old names, each read for one release: old -> new.",
        f"OLD_NAMES: dict[str, str] = {py(old_names(contract))}",
        "# Names no longer read, each with why: a deprecation for one release.",
        f"RETIRED: dict[str, str] = {py(contract.get('retired', {}))}",
    ]
    return "\n".join(lines) + "\n"


def components_py(contract: dict[str, Any]) -> str:
    rules = {key: config_entry(contract, key)["rules"] for key in contract["config"]}
    tree = config_tree(contract)
    names = contract["names"]
    lines = [
        f'"""{BY}.',
        "",
        "The contract as the components read it: the config file's keys, defaults and rules (config.py), the",
        'names, the container contract\'s paths, the size grammar and libvgpu\'s switches."""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        *names_py(contract),
        "",
        *sizes_py(contract),
        "",
        "# The container contract (names.container): where a container sees its allocation.",
        f"CONTAINER_REGION_DIR = {py_str(names['container']['region_dir'])}",
        f"CONTAINER_QUOTA_FILE = {py_str(names['container']['quota_file'])}",
        f"DEVICE_LIST_ROOT = {py_str(names['container']['device_list_root'])}",
        f"CONFIG_FILE = {py_str(names['config_file'])}",
        f"MAX_SHARE = {names['max_share']}",
        f"MAX_CORES_PER_GPU = {contract['settings']['vgpu_compute_shares_total']['max']}",
        "",
        "# The config file (config): every key's default, by section, and the rules of each key that has any.",
        f"CONFIG_SECTIONS = {py(SECTIONS_OF_CONFIG)}",
        f"CONFIG_DEFAULTS: dict[str, Any] = {py(tree)}",
        f"CONFIG_RULES: dict[str, dict[str, Any]] = {py({k: v for k, v in rules.items() if v})}",
        "",
        "# The defaults the components and the roles agree on, by name.",
        f"KUBELET_DIR = {py_str(setting_default(contract, 'vgpu_kubelet_dir'))}",
        f"DEVICE_PLUGIN_DIR = {py_str(tree['device_plugin']['kubelet_dir'])}",
        f"POD_RESOURCES_SOCKET = {py_str(tree['device_plugin']['pod_resources_socket'])}",
        f"MPS_PIPE_DIR = {py_str(tree['mps']['pipe_dir'])}",
        f"MONITOR_PORT = {tree['monitor']['port']}",
        f"DEVICE_PLUGIN_HEALTHZ_PORT = {tree['device_plugin']['healthz_port']}",
        f"MPS_HEALTHZ_PORT = {tree['mps']['healthz_port']}",
        f"DRA_HEALTHZ_PORT = {tree['dra']['healthz_port']}",
        f"EXTENDER_PORT = {tree['extender']['port']}",
    ]
    return "\n".join(lines) + "\n"


# Modules written for the collection (module_utils, which also runs on the nodes) and copied into the
# components' package, which the image carries alone.
COPIES = {
    "plugins/module_utils/memory_size.py": "files/components/src/vgpu_components/memory_size.py",
    "plugins/module_utils/rules.py": "files/components/src/vgpu_components/rules.py",
    "plugins/module_utils/gpus_annotation.py": "files/components/src/vgpu_components/gpus_annotation.py",
}
_COLLECTION_IMPORT = "ansible_collections.vgpu.isolation.plugins.module_utils."


def copied(root: Path, source: str) -> str:
    text = (root / source).read_text(encoding="utf-8").replace(_COLLECTION_IMPORT, "vgpu_components.")
    header = f"# generated from {source} by {GENERATOR} (make generate): do not edit.\n"
    return header + text


# ---- libvgpu ------------------------------------------------------------------------------------


def switches_def(contract: dict[str, Any]) -> str:
    rows = [(s["key"], s["env"], s["field"], str(s["default"]), str(s["bit"])) for s in contract["switches"]]
    # The columns of the header line below (each at least its widest cell and a blank).
    widths = [max(width, *(len(r[i]) + 2 for r in rows)) for i, width in enumerate((20, 21, 20, 9))]
    lines = [
        f"/* {BY}.",
        " * The interposer's switches: config.c is built from this list (the quota file keys, the environment",
        " * variables, the defaults, the bits of the region's flags word), and so are manage's names for those",
        " * bits. Values are exactly 0 or 1.",
        " *",
        " *      file key            environment          struct vgpu_config  default  flags bit */",
    ]
    for row in rows:
        cells = [f"{cell},".ljust(widths[i]) for i, cell in enumerate(row[:4])]
        lines.append(f"SWITCH({''.join(cells)}{row[4]})")
    return "\n".join(lines) + "\n"


# ---- docs ---------------------------------------------------------------------------------------


def variables_table(contract: dict[str, Any], section: str) -> str:
    lines = ["| variable | default | meaning |", "| --- | --- | --- |"]
    for name, entry in contract["settings"].items():
        if entry["section"] != section:
            continue
        literal = setting_default(contract, name)
        cell = doc_line(entry["shown"]) if literal is None else shown(literal)
        lines.append(f"| `{name}` | {cell} | {doc_line(entry['doc'])} |")
    return "\n".join(lines)


def cluster_wide_list(contract: dict[str, Any]) -> str:
    return "\n".join(
        f"- `{name}`: {doc_line(entry['why'])}"
        for name, entry in contract["settings"].items()
        if entry["scope"] == "cluster"
    )


def old_names_table(contract: dict[str, Any]) -> str:
    lines = ["| old name | read as |", "| --- | --- |"]
    lines += [f"| `{old}` | `{new}` |" for old, new in sorted(old_names(contract).items())]
    lines += [f"| `{name}` | nothing: {why} |" for name, why in sorted(contract.get("retired", {}).items())]
    return "\n".join(lines)


def config_table(contract: dict[str, Any]) -> str:
    lines = ["| key | default | used by | meaning |", "| --- | --- | --- | --- |"]
    for key in contract["config"]:
        entry = config_entry(contract, key)
        lines.append(f"| `{key}` | {shown(entry['default'])} | {entry['used_by']} | {doc_line(entry['doc'])} |")
    return "\n".join(lines)


# ---- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """A generated part of a hand-written file, between marker lines that start with `comment`."""

    name: str
    text: str
    comment: str = "#"
    end: str = ""


def splice(path: str, text: str, block: Block) -> str:
    start = f"{block.comment} >>> {BY} ({block.name}){block.end}"
    stop = f"{block.comment} <<< generated ({block.name}){block.end}"
    pattern = re.compile(
        rf"^(?P<indent>[ \t]*){re.escape(start)}\n.*?^(?P=indent){re.escape(stop)}$", re.MULTILINE | re.DOTALL
    )
    match = pattern.search(text)
    if match is None:
        raise ContractError(f"{path}: no marker lines of the generated block {block.name!r}:\n{start}\n{stop}")
    indent = match.group("indent")
    body = f"{indent}{start}\n{block.text}\n{indent}{stop}"
    return text[: match.start()] + body + text[match.end() :]


def outputs(root: Path = ROOT) -> dict[str, str]:
    """Every generated file's path and the text it must have."""
    contract = load(root)
    whole = {
        "roles/vgpu/defaults/main.yml": defaults_yml(contract),
        "roles/vgpu_stack/templates/vgpu-config.yaml.j2": config_template(contract),
        "plugins/module_utils/contract.py": module_utils_py(contract),
        "files/components/src/vgpu_components/contract.py": components_py(contract),
        "files/libvgpu/src/switches.def": switches_def(contract),
        **{target: copied(root, source) for source, target in COPIES.items()},
    }
    md = {"comment": "<!--", "end": " -->"}
    blocks = {
        "roles/vgpu/meta/argument_specs.yml": [
            Block("settings", spec_options(contract, scope_run=False)),
            Block("playbooks", spec_options(contract, scope_run=True)),
        ],
        "roles/vgpu/vars/main.yml": [Block("names", names_vars(contract))],
        "docs/variables.md": [
            *(Block(section, variables_table(contract, section), **md) for section in DOC_SECTIONS),
            Block("cluster-wide", cluster_wide_list(contract), **md),
            Block("old names", old_names_table(contract), **md),
        ],
        "files/components/README.md": [Block("config", config_table(contract), **md)],
        "galaxy.yml": [Block("version", f"version: {contract['version']}")],
    }
    for path, parts in blocks.items():
        text = (root / path).read_text(encoding="utf-8")
        for block in parts:
            text = splice(path, text, block)
        whole[path] = text
    return whole


def stale(root: Path = ROOT) -> list[str]:
    """The generated files that differ from a fresh generation."""
    found = []
    for path, text in outputs(root).items():
        target = root / path
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            found.append(path)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; fail naming each stale file")
    args = parser.parse_args(argv)
    try:
        if args.check:
            found = stale()
            for path in found:
                print(f"{path}: stale; it is generated from {CONTRACT}: run `make generate`", file=sys.stderr)
            return 1 if found else 0
        for path, text in outputs().items():
            target = ROOT / path
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                target.write_text(text, encoding="utf-8")
                print(f"wrote {path}")
    except ContractError as exc:
        print(f"{CONTRACT}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
