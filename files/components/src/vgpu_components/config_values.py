"""Config values from YAML and from VGPU_<SECTION>_<KEY> environment variables, converted to the
type of their default; a value that does not convert is a ConfigError that names the key (or the
variable) and the value. The keys and their defaults are the schema's (config.py)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

import yaml

log = logging.getLogger("vgpu_components.config")


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key and what is expected."""


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ConfigError(f"{name}: expected true or false, got {value!r}")


def _as_number(name: str, value: Any, kind: type) -> Any:
    what = "an integer" if kind is int else "a number"
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, str))
        or (kind is int and isinstance(value, float))
    ):
        raise ConfigError(f"{name}: expected {what}, got {value!r}")
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{name}: expected {what}, got {value!r}") from None


def _as_str(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(f"{name}: expected a string, got {value!r}")
    return str(value)


def _as_mapping(name: str, value: Any, default: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, str):
        value = yaml.safe_load(value)
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name}: expected a mapping, got {value!r}")
    merged = dict(default)
    for key, item in value.items():
        if key not in default:
            raise ConfigError(f"{name}: unknown key {key!r}; expected one of {sorted(default)}")
        merged[key] = _coerce(f"{name}.{key}", item, default[key])
    return merged


def _coerce(name: str, value: Any, default: Any) -> Any:
    """Return value converted to the type of default, or raise ConfigError naming the key."""
    if isinstance(default, bool):
        return _as_bool(name, value)
    if isinstance(default, (int, float)):
        return _as_number(name, value, type(default))
    if isinstance(default, str):
        return _as_str(name, value)
    if isinstance(default, dict):
        return _as_mapping(name, value, default)
    return value


def merge(
    target: dict[str, Any],
    source: Mapping[str, Any],
    defaults: Mapping[str, Any],
    sections: Collection[str],
    where: str = "",
) -> None:
    """Set target's keys from source (a config file's mapping), each converted to its default's type;
    the keys in `sections` are mappings merged key by key."""
    for key, value in source.items():
        if key not in defaults:
            # Forward compatibility: a newer ConfigMap may carry keys this version does not know.
            log.warning("ignoring unknown config key %s%s", where, key)
            continue
        default = defaults[key]
        if key in sections:
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise ConfigError(f"{key}: expected a mapping, got {value!r}")
            merge(target[key], value, default, (), f"{key}.")
        else:
            target[key] = _coerce(f"{where}{key}", value, default)


def env_name(section: str | None, key: str) -> str:
    """The environment variable that overrides a key: VGPU_<KEY> or VGPU_<SECTION>_<KEY>."""
    return f"VGPU_{section.upper()}_{key.upper()}" if section else f"VGPU_{key.upper()}"


def apply_environment(
    target: dict[str, Any], defaults: Mapping[str, Any], sections: Collection[str], environ: Mapping[str, str]
) -> None:
    """Set target's keys from their VGPU_ environment variables (env_name), converted as in merge()."""
    for key, default in defaults.items():
        if key in sections:
            for sub, sub_default in default.items():
                name = env_name(key, sub)
                if name in environ:
                    target[key][sub] = _coerce(name, environ[name], sub_default)
        else:
            name = env_name(None, key)
            if name in environ:
                target[key] = _coerce(name, environ[name], default)
