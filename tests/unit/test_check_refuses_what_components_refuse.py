"""A setting the settings check passes must start the components (issue 39, the drifts).

The inventory's settings reach the components through the vgpu-config ConfigMap; a value the
components' config refuses makes every component exit at start (exit status 2), long after the run
that set it succeeded. So for each such value the check must refuse it first, naming the setting.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.filter.settings import settings_problems
from ansible_collections.vgpu.isolation.plugins.lookup.settings_schema import load
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import SETTINGS
from role_render import ROOT
from vgpu_components import config

SCHEMA = load(str(ROOT))
DEFAULTS = {name: entry["default"] for name, entry in SETTINGS.items() if entry["default"] is not None}


def components_refuse(key: tuple[str, ...], value: Any) -> bool:
    cfg = copy.deepcopy(config.DEFAULTS)
    *sections, last = key
    target = cfg
    for section in sections:
        target = target[section]
    target[last] = value
    try:
        config.validate(cfg)
    except config.ConfigError:
        return True
    return False


# (setting, value an inventory may give, the component key it becomes)
DRIFTS = [
    pytest.param(
        "vgpu_mps_set_exclusive_process",
        True,
        ("mps", "set_exclusive_process"),
        id="exclusive-process",
    ),
    pytest.param(
        "vgpu_resource_prefix",
        "gpus.kubernetes.io",
        ("resource_prefix",),
        id="prefix-in-kubernetes-io",
    ),
]


@pytest.mark.parametrize(("setting", "value", "key"), DRIFTS)
def test_the_settings_check_refuses_what_the_components_refuse(setting, value, key):
    assert components_refuse(key, value), "the components accept it: no drift to guard"
    problems = settings_problems({**DEFAULTS, setting: value}, SCHEMA, [setting])
    assert [p for p in problems if p.startswith(f"{setting}: ")], problems
