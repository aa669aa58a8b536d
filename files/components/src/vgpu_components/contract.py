"""generated from contract/contract.yml by contract/generate.py (make generate): do not edit.

The contract as the components read it: the config file's keys, defaults and rules (config.py), the
names, the container contract's paths, the size grammar and libvgpu's switches."""

from __future__ import annotations

from typing import Any

VERSION = "0.1.0"

# The names (names): <prefix>/<name> each; the DRA driver is <dra_driver>.<prefix>.
RESOURCES = {
    "memory": "gpu-memory",
    "cores": "gpu-cores",
}
ANNOTATIONS = {
    "gpus": "gpus",
    "gpu_uuid": "gpu-uuid",
    "gpu_index": "gpu-index",
    "assume_time": "assume-time",
    "unit_mib": "unit-mib",
    "managed_by": "managed-by",
    "config_sha256": "config-sha256",
    "image_sha256": "image-sha256",
}
LABELS = {
    "gpu_node": "gpu-node",
    "mps": "mps",
}
DRA_DRIVER = "gpu"
COMPONENTS = (
    {
        "name": "nvidia-shared-device-plugin",
        "module": "device_plugin",
        "path": "extender",
        "runs_on": "gpu_nodes",
    },
    {
        "name": "vgpu-dra-driver",
        "module": "dra_driver",
        "path": "dra",
        "runs_on": "gpu_nodes",
    },
    {
        "name": "cgpu-monitor",
        "module": "monitor",
        "path": "both",
        "runs_on": "gpu_nodes",
    },
    {
        "name": "nvidia-mps",
        "module": "mps",
        "path": "both",
        "runs_on": "mps_nodes",
    },
    {
        "name": "gpushare-scheduler-extender",
        "module": "extender",
        "path": "extender",
        "runs_on": "control_plane",
    },
)

# The size grammar (sizes): a suffix's MiB, the suffixes refused and why, the largest size.
SIZE_MIB_PER_SUFFIX = {
    "": 1,
    "mi": 1,
    "mib": 1,
    "gi": 1024,
    "gib": 1024,
    "ti": 1048576,
    "tib": 1048576,
}
SIZE_BELOW_MIB = (
    "ki",
    "kib",
)
SIZE_DECIMAL = (
    "b",
    "k",
    "kb",
    "m",
    "mb",
    "g",
    "gb",
    "t",
    "tb",
)
SIZE_MAX_MIB = 17592186044415
SIZE_EXPECTED = "a whole number of MiB (3000) or a string with a binary suffix ('3000MiB', '3GiB' or '3Gi')"

# The resource prefix (names.resource_prefix): its form, and the domain Kubernetes keeps.
PREFIX_DEFAULT = "vgpu.io"
PREFIX_PATTERN = "^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$"
PREFIX_EXPECTED = "a DNS subdomain such as 'vgpu.io'"
PREFIX_RESERVED_DOMAIN = "kubernetes.io"

# libvgpu's switches (switches): the quota file's key, the environment variable, default, bit.
SWITCHES = (
    (
        "limit",
        "LIMIT",
        1,
        0,
    ),
    (
        "gpu_virtual_memory",
        "GPU_VIRTUAL_MEMORY",
        1,
        1,
    ),
    (
        "gpu_cgroup_enable",
        "GPU_CGROUP_ENABLE",
        0,
        2,
    ),
    (
        "cgroup_map_mode",
        "CGROUP_MAP_MODE",
        0,
        3,
    ),
    (
        "gpu_compute_audit",
        "GPU_COMPUTE_AUDIT",
        0,
        4,
    ),
)

# The container contract (names.container): where a container sees its allocation.
CONTAINER_REGION_DIR = "/var/run/vgpu"
CONTAINER_QUOTA_FILE = "/etc/vgpu/quota.conf"
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"
CONFIG_FILE = "/etc/vgpu/config.yaml"
MAX_SHARE = 100
MAX_CORES_PER_GPU = 1000

# The config file (config): every key's default, by section, and the rules of each key that has any.
CONFIG_SECTIONS = (
    "device_plugin",
    "monitor",
    "mps",
    "extender",
    "dra",
)
CONFIG_DEFAULTS: dict[str, Any] = {
    "resource_prefix": "vgpu.io",
    "unit_mib": 100,
    "reserved_mib": 0,
    "install_prefix": "/opt/vgpu",
    "state_dir": "/var/lib/vgpu",
    "log_format": "json",
    "log_level": "info",
    "device_plugin": {
        "kubelet_dir": "/var/lib/kubelet/device-plugins",
        "pod_resources_socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
        "healthz_port": 9396,
        "mps_enabled": False,
        "mps_active_thread_percentage": 100,
        "mps_pinned_memory_limit": True,
        "compute_shares": False,
        "cores_per_gpu": 100,
        "switches": {
            "limit": 1,
            "gpu_virtual_memory": 1,
            "gpu_cgroup_enable": 0,
            "cgroup_map_mode": 0,
            "gpu_compute_audit": 0,
        },
        "xid_recovery_s": 60,
        "annotation_refresh_s": 30,
        "pod_resources_poll_s": 2.0,
        "region_gc_grace_s": 300.0,
        "max_message_bytes": 2097152,
    },
    "monitor": {
        "port": 9395,
        "pod_resources_socket": "/var/lib/kubelet/pod-resources/kubelet.sock",
        "scrape_timeout_s": 10.0,
        "enforcement": "evict",
        "grace_seconds": 30.0,
        "termination_grace_seconds": 5,
        "context_allowance_mib": 512,
        "unattributed_tolerance_mib": 512,
        "check_interval_s": 5.0,
    },
    "mps": {
        "pipe_dir": "/run/nvidia/mps",
        "log_dir": "/run/nvidia/mps/log",
        "set_exclusive_process": False,
        "healthz_port": 9397,
        "control_binary": "nvidia-cuda-mps-control",
        "probe_interval_s": 10.0,
        "probe_timeout_s": 5.0,
        "restart_backoff_s": 2.0,
        "start_timeout_s": 10.0,
    },
    "extender": {
        "address": "127.0.0.1",
        "port": 32766,
        "reservation_ttl_s": 300,
        "tls_cert_file": "",
        "tls_key_file": "",
        "client_ca_file": "",
    },
    "dra": {
        "plugins_dir": "/var/lib/kubelet/plugins",
        "registry_dir": "/var/lib/kubelet/plugins_registry",
        "cdi_dir": "/var/run/cdi",
        "nvidia_cdi_dirs": "/etc/cdi,/var/run/cdi",
        "healthz_port": 9398,
        "resync_s": 60.0,
    },
}
CONFIG_RULES: dict[str, dict[str, Any]] = {
    "resource_prefix": {
        "prefix": True,
    },
    "unit_mib": {
        "size": 1,
    },
    "reserved_mib": {
        "size": 0,
    },
    "log_format": {
        "choices": [
            "json",
            "text",
        ],
    },
    "log_level": {
        "choices": [
            "debug",
            "info",
            "warning",
            "error",
        ],
    },
    "device_plugin.healthz_port": {
        "min": 0,
        "max": 65535,
    },
    "device_plugin.mps_active_thread_percentage": {
        "min": 1,
        "max": 100,
    },
    "device_plugin.cores_per_gpu": {
        "min": 1,
        "max": 1000,
    },
    "device_plugin.switches": {
        "switches": True,
    },
    "device_plugin.xid_recovery_s": {
        "min": 0,
    },
    "device_plugin.annotation_refresh_s": {
        "above": 0,
    },
    "device_plugin.pod_resources_poll_s": {
        "above": 0,
    },
    "device_plugin.region_gc_grace_s": {
        "min": 0,
    },
    "device_plugin.max_message_bytes": {
        "above": 0,
    },
    "monitor.port": {
        "min": 0,
        "max": 65535,
    },
    "monitor.scrape_timeout_s": {
        "above": 0,
    },
    "monitor.enforcement": {
        "choices": [
            "evict",
            "report",
        ],
    },
    "monitor.grace_seconds": {
        "min": 0,
        "max": 86400,
    },
    "monitor.termination_grace_seconds": {
        "min": 0,
        "max": 3600,
    },
    "monitor.context_allowance_mib": {
        "size": 0,
    },
    "monitor.unattributed_tolerance_mib": {
        "size": 0,
    },
    "monitor.check_interval_s": {
        "above": 0,
    },
    "mps.set_exclusive_process": {
        "only": False,
        "why_only": (
            "every GPU allocation has its own MPS server (docs/architecture.md), and a GPU in "
            "EXCLUSIVE_PROCESS mode takes one process; the GPUs stay in Default compute mode"
        ),
    },
    "mps.healthz_port": {
        "min": 0,
        "max": 65535,
    },
    "mps.probe_interval_s": {
        "above": 0,
    },
    "mps.probe_timeout_s": {
        "above": 0,
    },
    "mps.restart_backoff_s": {
        "min": 0,
    },
    "mps.start_timeout_s": {
        "above": 0,
    },
    "extender.port": {
        "min": 0,
        "max": 65535,
    },
    "extender.reservation_ttl_s": {
        "above": 0,
    },
    "dra.healthz_port": {
        "min": 0,
        "max": 65535,
    },
    "dra.resync_s": {
        "above": 0,
    },
}

# The defaults the components and the roles agree on, by name.
KUBELET_DIR = "/var/lib/kubelet"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
MPS_PIPE_DIR = "/run/nvidia/mps"
MONITOR_PORT = 9395
DEVICE_PLUGIN_HEALTHZ_PORT = 9396
MPS_HEALTHZ_PORT = 9397
DRA_HEALTHZ_PORT = 9398
EXTENDER_PORT = 32766
