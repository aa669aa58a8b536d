"""The settings schema of the components: every key of the shared config file
(/etc/vgpu/config.yaml), its default (and so its type), and the checks types cannot express.

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

from vgpu_components import switches
from vgpu_components.config_values import ConfigError, apply_environment, merge
from vgpu_components.contract import (
    DEVICE_PLUGIN_DIR,
    DEVICE_PLUGIN_HEALTHZ_PORT,
    DRA_HEALTHZ_PORT,
    EXTENDER_PORT,
    KUBELET_DIR,
    MAX_CORES_PER_GPU,
    MONITOR_PORT,
    MPS_HEALTHZ_PORT,
    MPS_PIPE_DIR,
    POD_RESOURCES_SOCKET,
)

SECTIONS = ("device_plugin", "monitor", "mps", "extender", "dra")
MAX_TERMINATION_GRACE_S = 3600


DEFAULT_SWITCHES: dict[str, int] = dict(switches.DEFAULTS)  # libvgpu's switches.def, the one list

DEFAULTS: dict[str, Any] = {
    "resource_prefix": "vgpu.io",
    "unit_mib": 100,
    "reserved_mib": 0,
    "install_prefix": "/opt/vgpu",
    "state_dir": "/var/lib/vgpu",
    "log_format": "json",
    "log_level": "info",
    "device_plugin": {
        "kubelet_dir": DEVICE_PLUGIN_DIR,
        "pod_resources_socket": POD_RESOURCES_SOCKET,
        "healthz_port": DEVICE_PLUGIN_HEALTHZ_PORT,
        "mps_enabled": False,
        # MPS nodes without compute shares: every allocation's MPS daemon's default active thread percentage.
        "mps_active_thread_percentage": 100,
        # Each allocation's MPS daemon's pinned device-memory limit = the quota, where the driver has it (CUDA 11.5+).
        "mps_pinned_memory_limit": True,
        # MPS nodes: advertise <prefix>/gpu-cores, each container's share of a GPU in percent.
        "compute_shares": False,
        # What the shares of one GPU may add up to: 100 = the GPU; more oversubscribes it.
        "cores_per_gpu": 100,
        "switches": dict(DEFAULT_SWITCHES),
        "xid_recovery_s": 60,
        "annotation_refresh_s": 30,
        "pod_resources_poll_s": 2.0,
        "region_gc_grace_s": 300.0,
        "max_message_bytes": 2 * 1024 * 1024,
    },
    "monitor": {
        "port": MONITOR_PORT,
        "pod_resources_socket": POD_RESOURCES_SOCKET,
        "scrape_timeout_s": 10.0,
        # Ground truth (enforcement.py): each container's real GPU memory from NVML against its
        # quota plus context_allowance_mib per container (no quota: 0); over for grace_seconds
        # (accumulated): an Event on the pod, then evict (the pod deleted) or report.
        "enforcement": "evict",
        "grace_seconds": 30.0,
        # evict: the most grace period a pod over its quota gets; still over at the first check
        # that long after, it is deleted at once (enforcement_actions.py).
        "termination_grace_seconds": 5,
        "context_allowance_mib": 512,
        # GPU memory no container answers for (NVML's used beyond every process's entry, entries of
        # exited PIDs) above this is traced to who holds the GPU, or reported (attribution.py).
        "unattributed_tolerance_mib": 512,
        "check_interval_s": 5.0,
    },
    "mps": {
        "pipe_dir": MPS_PIPE_DIR,
        "log_dir": f"{MPS_PIPE_DIR}/log",
        "set_exclusive_process": False,
        "healthz_port": MPS_HEALTHZ_PORT,
        "control_binary": "nvidia-cuda-mps-control",
        "probe_interval_s": 10.0,
        "probe_timeout_s": 5.0,
        "restart_backoff_s": 2.0,
        # How long the device plugin's Allocate (the DRA driver's prepare) waits for the daemon of a
        # new allocation before it refuses the container (mps.py).
        "start_timeout_s": 10.0,
    },
    "extender": {
        "address": "127.0.0.1",
        "port": EXTENDER_PORT,
        "reservation_ttl_s": 300,
        # All three: HTTPS, and only clients whose certificate the CA signed (kube-scheduler's
        # extender tlsConfig). None: plain HTTP, allowed on a loopback address only.
        "tls_cert_file": "",
        "tls_key_file": "",
        "client_ca_file": "",
    },
    # The DRA driver (dra_driver.py); the container contract's settings (switches, MPS) are the
    # device_plugin section's, which both node agents hand to containers.
    "dra": {
        "plugins_dir": f"{KUBELET_DIR}/plugins",  # its socket: <plugins_dir>/<driver>/dra.sock
        "registry_dir": f"{KUBELET_DIR}/plugins_registry",  # kubelet's plugin watcher
        "cdi_dir": "/var/run/cdi",  # where it writes a CDI specification per prepared claim
        # Where NVIDIA's CDI specifications of the GPUs may be (the runtime's cdi mode), comma-separated.
        "nvidia_cdi_dirs": "/etc/cdi,/var/run/cdi",
        "healthz_port": DRA_HEALTHZ_PORT,
        "resync_s": 60.0,  # how often the ResourceSlice is checked and repaired
    },
}

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
    """Checks that types alone cannot express."""
    if config["unit_mib"] <= 0:
        raise ConfigError(f"unit_mib: expected a positive number of MiB, got {config['unit_mib']}")
    if config["reserved_mib"] < 0:
        raise ConfigError(f"reserved_mib: expected 0 or more MiB, got {config['reserved_mib']}")
    if config["log_format"] not in ("json", "text"):
        raise ConfigError(f"log_format: expected json or text, got {config['log_format']!r}")
    pct = config["device_plugin"]["mps_active_thread_percentage"]
    if not 1 <= pct <= 100:
        raise ConfigError(f"device_plugin.mps_active_thread_percentage: expected 1-100, got {pct}")
    cores = config["device_plugin"]["cores_per_gpu"]
    if not 1 <= cores <= MAX_CORES_PER_GPU:
        raise ConfigError(
            f"device_plugin.cores_per_gpu: expected 1-{MAX_CORES_PER_GPU} (100 = one GPU's SMs; more "
            f"oversubscribes it), got {cores}"
        )
    prefix = config["resource_prefix"]
    if not prefix or "/" in prefix or prefix.endswith("kubernetes.io"):
        raise ConfigError(f"resource_prefix: expected a domain such as vgpu.io, got {prefix!r}")
    for section, key in (
        ("device_plugin", "healthz_port"),
        ("monitor", "port"),
        ("mps", "healthz_port"),
        ("dra", "healthz_port"),
    ):
        port = config[section][key]
        if not 0 <= port <= 65535:
            raise ConfigError(f"{section}.{key}: expected a TCP port 0-65535, got {port}")
    if config["mps"]["set_exclusive_process"]:
        raise ConfigError(
            "mps.set_exclusive_process: cannot be true: every GPU allocation has its own MPS server "
            "(docs/architecture.md), and a GPU in EXCLUSIVE_PROCESS mode takes one process; keep the GPUs "
            "in Default compute mode"
        )
    if config["mps"]["start_timeout_s"] <= 0:
        timeout = config["mps"]["start_timeout_s"]
        raise ConfigError(f"mps.start_timeout_s: expected a positive number of seconds, got {timeout}")
    _validate_monitor(config["monitor"])
    _validate_extender(config["extender"])
    if config["dra"]["resync_s"] <= 0:
        raise ConfigError(f"dra.resync_s: expected a positive number of seconds, got {config['dra']['resync_s']}")


def _validate_monitor(monitor: Mapping[str, Any]) -> None:
    if monitor["enforcement"] not in ("evict", "report"):
        raise ConfigError(f"monitor.enforcement: expected evict or report, got {monitor['enforcement']!r}")
    for key in ("grace_seconds", "context_allowance_mib", "unattributed_tolerance_mib"):
        if monitor[key] < 0:
            raise ConfigError(f"monitor.{key}: expected 0 or more, got {monitor[key]}")
    if not 0 <= monitor["termination_grace_seconds"] <= MAX_TERMINATION_GRACE_S:
        raise ConfigError(
            f"monitor.termination_grace_seconds: expected 0-{MAX_TERMINATION_GRACE_S} seconds (the most grace "
            f"period a pod over its quota gets), got {monitor['termination_grace_seconds']}"
        )
    if monitor["check_interval_s"] <= 0:
        raise ConfigError(
            f"monitor.check_interval_s: expected a positive number of seconds, got {monitor['check_interval_s']}"
        )


def _validate_extender(extender: Mapping[str, Any]) -> None:
    if not 0 <= extender["port"] <= 65535:
        raise ConfigError(f"extender.port: expected a TCP port 0-65535, got {extender['port']}")
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
