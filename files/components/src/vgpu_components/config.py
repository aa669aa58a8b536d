"""The components' configuration: every key of the shared config file (/etc/vgpu/config.yaml), its
default (and so its type) and its rules are the contract's (contract/contract.yml, `config`, generated
into contract.py); the rules are checked by rules.py, the checker the settings check uses too, so a
value the settings check passes is one the components accept. What the contract cannot state (the
extender's TLS keys go together, plain HTTP only on a loopback address) is checked here.

One YAML file serves all the components (docs/architecture.md). Every key has a default, so a
missing file or section is fine; load() reads the file and the VGPU_<SECTION>_<KEY> environment
overrides (config_values.py), and a value that cannot be used is an error that names the key.
"""

from __future__ import annotations

import copy
import ipaddress
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from vgpu_components import contract, rules, switches
from vgpu_components.config_values import ConfigError, apply_environment, merge

SECTIONS = contract.CONFIG_SECTIONS
DEFAULT_SWITCHES: dict[str, int] = dict(switches.DEFAULTS)
DEFAULTS: dict[str, Any] = contract.CONFIG_DEFAULTS

log = logging.getLogger(__name__)


def load(path: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read the config file (missing file: defaults), then apply environment overrides."""
    environ = os.environ if environ is None else environ
    config = copy.deepcopy(DEFAULTS)
    if path is not None and Path(path).exists():
        try:
            data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        if data is not None:
            if not isinstance(data, Mapping):
                raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
            merge(config, data, DEFAULTS, SECTIONS)
    elif path is not None:
        log.info("config file %s not found; using defaults and environment", path)
    apply_environment(config, DEFAULTS, SECTIONS, environ)
    validate(config)
    return config


def validate(config: Mapping[str, Any]) -> None:
    """Each key's rules (the contract's), then what they cannot express; the first problem raises."""
    for key, rule in contract.CONFIG_RULES.items():
        section, _dot, name = key.rpartition(".")
        value = (config[section] if section else config)[name]
        problems = rules.problems(key, value, rule)
        if problems:
            raise ConfigError(problems[0])
    _validate_extender(config["extender"])


def _validate_extender(extender: Mapping[str, Any]) -> None:
    """The TLS keys go together; without them, plain HTTP on a loopback address only."""
    tls_keys = ("tls_cert_file", "tls_key_file", "client_ca_file")
    missing = [f"extender.{key}" for key in tls_keys if not extender[key]]
    if missing and len(missing) < len(tls_keys):
        raise ConfigError(f"{', '.join(missing)}: needed with the other extender TLS keys (set all three, or none)")
    if missing and not _loopback(extender["address"]):
        raise ConfigError(
            f"extender.address {extender['address']!r}: refusing to serve plain HTTP, which authenticates no "
            "caller, beyond a loopback address; set extender.tls_cert_file, tls_key_file and client_ca_file "
            "(mTLS with kube-scheduler) or listen on 127.0.0.1"
        )


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
