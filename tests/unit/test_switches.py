"""One list of interposer switches (issue 26 item 2): files/libvgpu/src/switches.def.

libvgpu's config.c and manage's names for the region's flags are built from that file. Every other
home of a switch name or default is checked against it here: the components' table
(vgpu_components.switches, which config.py and the container contract use), vgpu_stack's defaults,
argument spec and ConfigMap template, and the switches the vgpu_verify module turns on. A copy of
switches.def with a switch renamed or added shows that the check catches each home.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.module_utils import gpu_verify
from role_render import ROOT

sys.path.insert(0, str(ROOT / "files" / "components" / "src"))
from vgpu_components import allocator, switches
from vgpu_components.config import DEFAULTS
from vgpu_components.nvml import Gpu

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


ROLE = ROOT / "roles" / "vgpu_stack"


def role_default() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["vgpu_stack_switches"]


def spec_option() -> dict:
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    return spec["argument_specs"]["main"]["options"]["vgpu_stack_switches"]


def template_keys() -> list[str]:
    text = (ROLE / "templates" / "vgpu-config.yaml.j2").read_text()
    match = re.search(r"\{% for key in \[([^\]]*)\] %\}\n    \{\{ key \}\}: \{\{ vgpu_stack_switches\[key\]", text)
    assert match, "vgpu-config.yaml.j2 no longer lists the switches as this test expects"
    return re.findall(r"'(\w+)'", match.group(1))


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


def contract() -> allocator.Allocation:
    gpu = Gpu(uuid="GPU-0", index=0, total_mib=1000)
    cfg = {**DEFAULTS, "state_dir": "/tmp/state"}  # noqa: S108 (never written: the contract is data)
    return allocator.container_contract(gpu, 1, 100, "a" * 16, cfg)


def drift(listed: Sequence[switches.Switch]) -> list[str]:
    """Each home whose switches differ from `listed` (switches.def's lines, parsed)."""
    keys = [s.key for s in listed]
    defaults = {s.key: s.default for s in listed}
    envs = {s.env for s in listed}
    given = contract()  # from config.DEFAULTS: each switch at its default
    homes = {
        "vgpu_components.switches.SWITCHES": list(switches.SWITCHES) == list(listed),
        "config.DEFAULTS device_plugin.switches": DEFAULTS["device_plugin"]["switches"] == defaults,
        "the container contract's environment": {k: v for k, v in given.envs.items() if k not in NOT_SWITCHES}
        == {s.env: str(s.default) for s in listed},
        "the container contract's quota file": quota_switches(given.quota_text)
        == [[s.key, str(s.default)] for s in listed],
        "vgpu_stack defaults vgpu_stack_switches": role_default() == defaults,
        "vgpu_stack argument spec default": spec_option()["default"] == defaults,
        "vgpu_stack argument spec description": f"({', '.join(keys)})" in " ".join(spec_option()["description"]),
        "vgpu-config.yaml.j2": template_keys() == keys,
        "gpu_verify.ENFORCING_SWITCHES": set(gpu_verify.ENFORCING_SWITCHES) <= envs,
    }
    return [home for home, same in homes.items() if not same]


def test_switches_def_parses_to_the_components_table():
    assert parse(SWITCHES_DEF.read_text()) == switches.SWITCHES, (
        "vgpu_components/switches.py differs from files/libvgpu/src/switches.def: copy the lines"
    )


def test_every_home_of_a_switch_is_switches_def():
    assert drift(parse(SWITCHES_DEF.read_text())) == []


def renamed(text: str) -> str:
    return text.replace("gpu_compute_audit,  GPU_COMPUTE_AUDIT,", "gpu_compute_trace,  GPU_COMPUTE_TRACE,")


def added(text: str) -> str:
    return text + "SWITCH(gpu_new_switch,     GPU_NEW_SWITCH,      new_switch,         0,       5)\n"


# Where each switch's default lives, and where also its name (drift() names each home so).
HOMES_OF_A_DEFAULT = {
    "vgpu_components.switches.SWITCHES",
    "config.DEFAULTS device_plugin.switches",
    "the container contract's environment",
    "the container contract's quota file",
    "vgpu_stack defaults vgpu_stack_switches",
    "vgpu_stack argument spec default",
}
HOMES_OF_A_NAME = HOMES_OF_A_DEFAULT | {"vgpu_stack argument spec description", "vgpu-config.yaml.j2"}


@pytest.mark.parametrize("change", [renamed, added], ids=["renamed", "added"])
def test_a_switch_renamed_or_added_in_switches_def_is_caught_in_every_home(change, tmp_path: Path):
    copy = tmp_path / "switches.def"
    copy.write_text(change(SWITCHES_DEF.read_text()))
    listed = parse(copy.read_text())
    assert listed != switches.SWITCHES
    missed = HOMES_OF_A_NAME - set(drift(listed))
    assert missed == set()


def test_a_renamed_switch_the_verify_module_turns_on_is_caught():
    text = SWITCHES_DEF.read_text().replace("LIMIT,  ", "LIMITS, ")
    assert "gpu_verify.ENFORCING_SWITCHES" in drift(parse(text))


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


def test_a_default_changed_in_switches_def_is_caught_in_every_home_of_a_default():
    text = SWITCHES_DEF.read_text().replace("cgroup_enable,      0,", "cgroup_enable,      1,")
    assert set(drift(parse(text))) >= HOMES_OF_A_DEFAULT
