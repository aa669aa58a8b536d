"""The interposer's switches as the components read them: the contract's list (contract/contract.yml,
switches), which libvgpu's src/switches.def is generated from too (contract/generate.py)."""

from __future__ import annotations

from typing import NamedTuple

from vgpu_components import contract


class Switch(NamedTuple):
    key: str  # the quota file's key, and the key under device_plugin.switches in the config file
    env: str  # the environment variable
    default: int  # 0 or 1
    bit: int  # the switch's bit in the region's flags word


SWITCHES = tuple(Switch(*switch) for switch in contract.SWITCHES)
DEFAULTS = {switch.key: switch.default for switch in SWITCHES}
