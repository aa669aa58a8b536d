# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt),
# or, as the components' copy of it, Apache License 2.0 (see LICENSES/Apache-2.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later OR Apache-2.0
"""The rules a setting's value, or a key of the components' config, must follow (contract/contract.yml):
one checker for the settings check (plugins/filter/settings.py) and, copied by contract/generate.py,
for the components' config (vgpu_components.rules, config.py). So the check refuses what the
components would refuse, for the same reason and in the same words.

A rule is a mapping with any of: min and max (a number's bounds), above (a bound a number must
exceed), choices, only (the one working value) with why_only, size (a memory size, and the smallest
MiB), form (the pattern of a version) with example, prefix (the resource prefix's form), switches
(a mapping of libvgpu's switches to 0 or 1). A value of another type than the rule is for is left to
each medium's type check, so one mistake is reported once.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.vgpu.isolation.plugins.module_utils.contract import (
    PREFIX_EXPECTED,
    PREFIX_PATTERN,
    PREFIX_RESERVED_DOMAIN,
    SWITCHES,
)
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib

_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
SWITCH_KEYS = tuple(switch[0] for switch in SWITCHES)


def problems(name: str, value: Any, rule: dict[str, Any]) -> list[str]:
    """What is wrong with ``value`` by ``rule``, one line each, naming ``name``; [] when nothing is."""
    found = []
    for check in (_bounds, _choices, _only, _size, _form, _prefix, _switches):
        problem = check(name, value, rule)
        if problem:
            found.append(problem)
    return found


def _number(value: Any) -> float | None:
    """An int or a float, or a string of one (what the command line gives); else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _flag(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _bounds(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    low, high, above = rule.get("min"), rule.get("max"), rule.get("above")
    number = _number(value)
    if number is None or (low is None and high is None and above is None):
        return None
    if low is not None and high is not None and not low <= number <= high:
        return f"{name}: {value!r} must be from {low} to {high}"
    if low is not None and high is None and number < low:
        return f"{name}: {value!r} must be {low} or more"
    if high is not None and low is None and number > high:
        return f"{name}: {value!r} must be {high} or less"
    if above is not None and number <= above:
        return f"{name}: {value!r} must be more than {above}"
    return None


def _choices(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    choices = rule.get("choices")
    if not choices:
        return None
    shown = ", ".join(str(choice) for choice in choices)
    # A list's elements each (vgpu_stack_node_roles); a value by its text (an int given as a string).
    for item in value if isinstance(value, list) else [value]:
        if str(item) not in [str(choice) for choice in choices]:
            return f"{name}: {item!r} is not one of {shown}"
    return None


def _only(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    if "only" not in rule or _flag(value) in (None, rule["only"]):
        return None
    return f"{name}: {value!r} must be {str(rule['only']).lower()}: {rule['why_only']}"


def _size(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    if "size" not in rule:
        return None
    try:
        parse_mib(value, name, rule["size"])
    except ValueError as exc:
        return str(exc)
    return None


def _form(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    form = rule.get("form")
    if not form or not isinstance(value, str) or re.match(form["pattern"], value):
        return None
    return f"{name}: {value!r} is not a version of the form {form['example']}"


def _prefix(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    if not rule.get("prefix") or (value is not None and not isinstance(value, str)):
        return None
    if value is None or not re.match(PREFIX_PATTERN, value):
        return f"{name}: {value!r} must be {PREFIX_EXPECTED}"
    if value.endswith(PREFIX_RESERVED_DOMAIN):
        # The API server takes a resource name with "kubernetes.io/" in it for one of its own.
        return (
            f"{name}: {value!r} is in the {PREFIX_RESERVED_DOMAIN} domain, which Kubernetes keeps for its own "
            f"resources; choose a domain of your own, {PREFIX_EXPECTED}"
        )
    return None


def _switches(name: str, value: Any, rule: dict[str, Any]) -> str | None:
    if not rule.get("switches") or not isinstance(value, dict):
        return None
    for key, setting in value.items():
        if key not in SWITCH_KEYS:
            return f"{name}: {key!r} is not one of libvgpu's switches ({', '.join(SWITCH_KEYS)})"
        if isinstance(setting, bool) or str(setting) not in ("0", "1"):
            return f"{name}: {key}={setting!r} must be 0 or 1 (libvgpu refuses any other value)"
    return None
