"""A setting the settings check passes must start the components (issue 39).

The inventory's settings reach the components through the vgpu-config ConfigMap; a value the
components' config refuses makes every component exit at start (exit status 2), long after the run
that set it succeeded. Two of them did (the drifts of issue 39: vgpu_mps_set_exclusive_process true,
a resource prefix in kubernetes.io). Both sides now read one contract (contract/contract.yml) and
check it with one rule checker (module_utils/rules.py, copied into the components); this test holds
them to it: for every key of the components' config that an operator's setting becomes, each value
the key's rules refuse is refused by the settings check too, naming the setting.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.filter.settings import settings_problems
from ansible_collections.vgpu.isolation.plugins.lookup.settings_schema import load
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import SETTINGS
from role_render import ROOT
from vgpu_components import config, contract

from contract import generate

SCHEMA = load(str(ROOT))
DEFAULTS = {name: entry["default"] for name, entry in SETTINGS.items() if entry["default"] is not None}
CONTRACT = generate.load()


def default_of(key: str) -> Any:
    section, _dot, name = key.rpartition(".")
    return (config.DEFAULTS[section] if section else config.DEFAULTS)[name]


def components_refuse(key: str, value: Any) -> bool:
    cfg = copy.deepcopy(config.DEFAULTS)
    section, _dot, name = key.rpartition(".")
    (cfg[section] if section else cfg)[name] = value
    try:
        config.validate(cfg)
    except config.ConfigError:
        return True
    return False


def refused_values(rule: dict[str, Any], default: Any) -> list[Any]:
    """Values a key's rules refuse, one or more per rule: past each bound, outside the choices, not
    the one working value, a prefix Kubernetes keeps, a switch libvgpu does not know or value."""
    values: list[Any] = []
    if "min" in rule:
        values.append(rule["min"] - 1)
    if "max" in rule:
        values.append(rule["max"] + 1)
    if "above" in rule:
        values.append(rule["above"])
    if "size" in rule:
        values.append(rule["size"] - 1)
    if "choices" in rule:
        values.append("no-such-choice")
    if "only" in rule:
        values.append(not rule["only"])
    if rule.get("prefix"):
        values += ["gpus.kubernetes.io", "Vgpu_IO", "vgpu.io/gpu"]
    if rule.get("switches"):
        values += [{**default, "limit": 2}, {**default, "turbo": 1}]
    return values


CASES = [
    pytest.param(entry["setting"], key, value, id=f"{entry['setting']}={value!r}")
    for key, entry in CONTRACT["config"].items()
    if "setting" in entry
    for value in refused_values(contract.CONFIG_RULES.get(key, {}), default_of(key))
    if components_refuse(key, value)
]


def test_every_key_an_operator_s_setting_becomes_has_values_the_components_refuse():
    """The cases below exist (a rule lost on the way would leave them empty, and this test passing)."""
    assert {case.values[0] for case in CASES} >= {
        "vgpu_mps_set_exclusive_process",
        "vgpu_resource_prefix",
        "vgpu_memory_unit_mib",
        "vgpu_enforcement_grace_seconds",
        "vgpu_switches",
        "vgpu_monitor_port",
    }


@pytest.mark.parametrize(("setting", "key", "value"), CASES)
def test_the_settings_check_refuses_what_the_components_refuse(setting, key, value):
    problems = settings_problems({**DEFAULTS, setting: value}, SCHEMA, [setting])
    assert [p for p in problems if p.startswith(f"{setting}: ")], problems
