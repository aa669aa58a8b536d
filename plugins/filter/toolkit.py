# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The NVIDIA container toolkit's configuration: which of the settings roles/nvidia_container_runtime
wants are not in it yet (pure, no commands: the role reads the file with `nvidia-ctk config` and
sets what this names with `nvidia-ctk config --set`)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import tomllib
from ansible.errors import AnsibleFilterError


def _shown(value):
    """A TOML value as `nvidia-ctk config --set` takes it: booleans in lower case, a list's items
    joined by colons (--set splits a list setting's value there; at a comma it splits the flag)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ":".join(_shown(item) for item in value)
    return str(value)


def toolkit_settings_to_set(config_text, settings):
    """``key=value`` for each of ``settings`` ({dotted key: value}) that the configuration text
    (TOML, as ``nvidia-ctk config`` prints it) lacks or holds another value for. A commented-out
    default (``#accept-...``) is not a setting: the toolkit then uses its own default."""
    try:
        config = tomllib.loads(config_text or "")
    except tomllib.TOMLDecodeError as exc:
        raise AnsibleFilterError("the NVIDIA container toolkit's configuration is not TOML: %s" % exc) from None
    missing = []
    for key, wanted in settings.items():
        value = config  # type: object
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None or _shown(value) != _shown(wanted):
            missing.append("%s=%s" % (key, _shown(wanted)))
    return missing


class FilterModule(object):
    """The NVIDIA container toolkit's settings."""

    def filters(self):
        return {"toolkit_settings_to_set": toolkit_settings_to_set}
