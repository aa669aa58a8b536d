"""The interposer's switches: files/libvgpu/src/switches.def, the one list, as the components read it.

SWITCHES repeats that file's lines rather than reading the file at run time: the components' wheel
and image carry this package alone, not libvgpu's sources, and a copy needs no packaging of a file
from outside the package. tests/unit/test_switches.py parses switches.def with parse() and fails
when SWITCHES (or any other home of a switch) differs from it, so a switch renamed, added or
removed on one side only cannot go unnoticed.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Switch(NamedTuple):
    key: str  # the quota file's key, and the key under device_plugin.switches in the config file
    env: str  # the environment variable
    default: int  # 0 or 1
    bit: int  # the switch's bit in the region's flags word


# switches.def's SWITCH lines, in its order.
SWITCHES = (
    Switch("limit", "LIMIT", 1, 0),
    Switch("gpu_virtual_memory", "GPU_VIRTUAL_MEMORY", 1, 1),
    Switch("gpu_cgroup_enable", "GPU_CGROUP_ENABLE", 0, 2),
    Switch("cgroup_map_mode", "CGROUP_MAP_MODE", 0, 3),
    Switch("gpu_compute_audit", "GPU_COMPUTE_AUDIT", 0, 4),
)
DEFAULTS = {switch.key: switch.default for switch in SWITCHES}

# SWITCH(file key, environment, struct vgpu_config field, default, flags bit)
_LINE = re.compile(r"SWITCH\(\s*(\w+)\s*,\s*(\w+)\s*,\s*\w+\s*,\s*([01])\s*,\s*(\d+)\s*\)")


def parse(text: str) -> tuple[Switch, ...]:
    """The switches of switches.def's text; a SWITCH line of another shape is a ValueError naming it."""
    found = []
    for line in text.splitlines():
        if not line.startswith("SWITCH"):
            continue
        match = _LINE.fullmatch(line.strip())
        if not match:
            raise ValueError(f"not a switch line (key, env, field, 0 or 1, bit): {line}")
        key, env, default, bit = match.groups()
        found.append(Switch(key, env, int(default), int(bit)))
    return tuple(found)
