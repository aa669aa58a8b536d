"""One list of interposer switches (issue 26 item 2, issue 39): the contract's (contract/contract.yml).

libvgpu's src/switches.def, the components' table (vgpu_components.contract, which switches.py,
config.py's defaults and the container contract read), roles/vgpu's vgpu_switches (default and
argument spec) and the ConfigMap template are generated from that list (tests/unit/test_contract.py
fails when one is stale). What is written by hand is checked here: that libvgpu's generated list is
the components' (config.c and manage are built from it), the container contract the device plugin
and the DRA driver hand out, and the switches the vgpu_verify module turns on. A contract with a
switch renamed or added shows that the check catches each of them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence

import pytest
from ansible_collections.vgpu.isolation.plugins.module_utils import gpu_verify
from role_render import ROOT
from vgpu_components import container, switches
from vgpu_components.config import DEFAULTS
from vgpu_components.nvml import Gpu

from contract import generate

SWITCHES_DEF = ROOT / "files" / "libvgpu" / "src" / "switches.def"
# SWITCH(file key, environment, struct vgpu_config field, default, flags bit)
_LINE = re.compile(r"SWITCH\(\s*(\w+)\s*,\s*(\w+)\s*,\s*\w+\s*,\s*([01])\s*,\s*(\d+)\s*\)")


def parse(text: str) -> tuple[switches.Switch, ...]:
    """The switches of switches.def's text; a SWITCH line of another shape is a ValueError naming it."""
    found = []
    for line in text.splitlines():
        if not line.startswith("SWITCH"):
            continue
        match = _LINE.fullmatch(line.strip())
        if not match:
            raise ValueError(f"not a switch line (key, env, field, 0 or 1, bit): {line}")
        key, env, default, bit = match.groups()
        found.append(switches.Switch(key, env, int(default), int(bit)))
    return tuple(found)


# The container contract's variables that are not switches (docs/architecture.md).
NOT_SWITCHES = {
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "VGPU_MEMORY_LIMIT",
    "VGPU_CONFIG_FILE",
    "VGPU_REGION_DIR",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
}


def quota_switches(text: str) -> list[list[str]]:
    lines = [line for line in text.splitlines() if not line.startswith(("#", "memory_limit="))]
    return [line.split("=", 1) for line in lines]


def contract() -> container.Allocation:
    gpu = Gpu(uuid="GPU-0", index=0, total_mib=1000)
    cfg = {**DEFAULTS, "state_dir": "/tmp/state"}  # noqa: S108 (never written: the contract is data)
    return container.container_contract(gpu, 1, 100, "a" * 16, cfg)


def drift(listed: Sequence[switches.Switch]) -> list[str]:
    """Each hand-written home whose switches differ from `listed` (the contract's, as switches)."""
    defaults = {s.key: s.default for s in listed}
    envs = {s.env for s in listed}
    given = contract()  # from config.DEFAULTS: each switch at its default
    homes = {
        "libvgpu's src/switches.def": parse(SWITCHES_DEF.read_text()) == tuple(listed),
        "the components' table": tuple(listed) == switches.SWITCHES,
        "config.DEFAULTS device_plugin.switches": DEFAULTS["device_plugin"]["switches"] == defaults,
        "the container contract's environment": {k: v for k, v in given.envs.items() if k not in NOT_SWITCHES}
        == {s.env: str(s.default) for s in listed},
        "the container contract's quota file": quota_switches(given.quota_text)
        == [[s.key, str(s.default)] for s in listed],
        "gpu_verify.ENFORCING_SWITCHES": set(gpu_verify.ENFORCING_SWITCHES) <= envs,
    }
    return [home for home, same in homes.items() if not same]


def listed(contract_switches: list[dict]) -> tuple[switches.Switch, ...]:
    return tuple(switches.Switch(s["key"], s["env"], s["default"], s["bit"]) for s in contract_switches)


CONTRACT = generate.load()


def test_every_home_of_a_switch_is_the_contract_s_list():
    assert drift(listed(CONTRACT["switches"])) == []


def test_the_generated_switches_def_is_what_libvgpu_s_config_c_reads():
    assert parse(generate.switches_def(CONTRACT)) == listed(CONTRACT["switches"])


def renamed(switches_: list[dict]) -> None:
    switches_[-1].update(key="gpu_compute_trace", env="GPU_COMPUTE_TRACE")


def added(switches_: list[dict]) -> None:
    switches_.append({"key": "gpu_new_switch", "env": "GPU_NEW_SWITCH", "field": "new", "default": 0, "bit": 5})


@pytest.mark.parametrize("change", [renamed, added], ids=["renamed", "added"])
def test_a_switch_renamed_or_added_in_the_contract_is_caught_in_every_home(change):
    changed = copy.deepcopy(CONTRACT["switches"])
    change(changed)
    found = set(drift(listed(changed)))
    assert found >= {
        "libvgpu's src/switches.def",
        "the components' table",
        "config.DEFAULTS device_plugin.switches",
        "the container contract's environment",
        "the container contract's quota file",
    }


def test_a_renamed_switch_the_verify_module_turns_on_is_caught():
    changed = copy.deepcopy(CONTRACT["switches"])
    changed[0].update(env="LIMITS")
    assert "gpu_verify.ENFORCING_SWITCHES" in drift(listed(changed))


@pytest.mark.parametrize(
    "line",
    [
        "SWITCH(limit, LIMIT, limit_enforce, 2, 0)",  # values are exactly 0 or 1
        "SWITCH(limit, LIMIT, limit_enforce, 1)",  # a column missing
    ],
)
def test_a_switch_line_the_parser_cannot_read_is_an_error_naming_it(line):
    with pytest.raises(ValueError, match=re.escape(line)):
        parse(line + "\n")
