# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""generated from contract/contract.yml by contract/generate.py (make generate): do not edit.

The contract as the collection's plugins read it: the settings check (filter/settings.py), the size
parser (memory_size.py), the cluster views (filter/cluster.py) and the settings lookup."""

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

# Every setting (settings) but its docs: type, rules, scope, default (None: Jinja computes it).
SETTINGS: dict[str, dict[str, Any]] = {
    "vgpu_kubernetes_flavour": {
        "type": "str",
        "choices": [
            "k3s",
            "kubeadm",
            "none",
        ],
        "scope": "cluster",
        "why": "one cluster runs one distribution",
        "old_names": [
            "vgpu_stack_flavour",
        ],
        "default": "k3s",
    },
    "vgpu_k3s_version": {
        "type": "str",
        "form": {
            "pattern": "^v\\d+\\.\\d+\\.\\d+\\+k3s\\d+$",
            "example": "'v1.36.3+k3s1'",
        },
        "scope": "cluster",
        "why": "every K3s server and agent runs the same release",
        "default": "v1.36.3+k3s1",
    },
    "vgpu_kubernetes_version": {
        "type": "str",
        "form": {
            "pattern": "^\\d+\\.\\d+\\.\\d+$",
            "example": "'1.31.4'",
        },
        "scope": "cluster",
        "why": "every node joins at the control plane's version",
        "default": "1.36.3",
    },
    "vgpu_offline_bundle_dir": {
        "type": "str",
        "scope": "node",
        "default": "",
    },
    "vgpu_kubeconfig": {
        "type": "str",
        "scope": "node",
        "old_names": [
            "vgpu_stack_kubeconfig",
        ],
        "default": "",
    },
    "vgpu_kubernetes_client_venv": {
        "type": "str",
        "scope": "node",
        "default": "/opt/vgpu-python",
    },
    "vgpu_driver_branch": {
        "type": "str",
        "form": {
            "pattern": "^\\d+$",
            "example": "'470'",
        },
        "scope": "node",
        "old_names": [
            "vgpu_stack_driver_branch",
        ],
        "default": "470",
    },
    "vgpu_driver_version": {
        "type": "str",
        "form": {
            "pattern": "^\\d+\\.\\d+(\\.\\d+)?$",
            "example": "'470.256.02'",
        },
        "scope": "node",
        "default": "470.256.02",
    },
    "vgpu_cuda_version": {
        "type": "str",
        "form": {
            "pattern": "^\\d+\\.\\d+$",
            "example": "'11.4'",
        },
        "scope": "node",
        "default": "11.4",
    },
    "vgpu_driver_policy": {
        "type": "str",
        "choices": [
            "exact",
            "minimum",
        ],
        "scope": "node",
        "default": "exact",
    },
    "vgpu_driver_method": {
        "type": "str",
        "choices": [
            "auto",
            "none",
            "distro",
            "nvidia_repo",
            "runfile",
            "offline",
        ],
        "scope": "node",
        "default": "auto",
    },
    "vgpu_driver_reboot": {
        "type": "str",
        "choices": [
            "never",
            "if_needed",
            "always",
        ],
        "scope": "node",
        "default": "if_needed",
    },
    "vgpu_driver_reboot_local": {
        "type": "bool",
        "scope": "node",
        "default": False,
    },
    "vgpu_resource_prefix": {
        "type": "str",
        "prefix": True,
        "scope": "cluster",
        "why": "pods request <prefix>/gpu-memory, and kube-scheduler's extender manages it",
        "old_names": [
            "vgpu_stack_resource_prefix",
        ],
        "default": "vgpu.io",
    },
    "vgpu_scheduling": {
        "type": "str",
        "choices": [
            "extender",
            "dra",
        ],
        "scope": "cluster",
        "why": "kube-scheduler places every GPU pod of the cluster by one path, extender or DRA",
        "old_names": [
            "vgpu_stack_scheduling",
        ],
        "default": "extender",
    },
    "vgpu_gpu_node_taint": {
        "type": "bool",
        "scope": "cluster",
        "why": "the API server gives every GPU pod the toleration: every GPU node has the taint or none",
        "old_names": [
            "vgpu_stack_gpu_node_taint",
        ],
        "default": False,
    },
    "vgpu_gpu_memory_mib": {
        "type": "list",
        "elements": "raw",
        "scope": "node",
        "default": [],
    },
    "vgpu_memory_unit_mib": {
        "type": "raw",
        "size": 1,
        "scope": "cluster",
        "why": "one ConfigMap for every node, and every pod's request counts in it",
        "old_names": [
            "vgpu_stack_unit_mib",
        ],
        "default": 100,
    },
    "vgpu_reserved_memory_mib": {
        "type": "raw",
        "size": 0,
        "scope": "cluster",
        "why": "one ConfigMap for every node: the device plugins advertise what it leaves",
        "old_names": [
            "vgpu_stack_reserved_mib",
        ],
        "default": 0,
    },
    "vgpu_install_prefix": {
        "type": "str",
        "scope": "cluster",
        "why": "one ConfigMap tells every device plugin which folder to mount into containers",
        "old_names": [
            "vgpu_stack_install_prefix",
        ],
        "default": "/opt/vgpu",
    },
    "vgpu_mps_enabled": {
        "type": "bool",
        "scope": "node",
        "old_names": [
            "vgpu_stack_mps_enabled",
        ],
        "default": False,
    },
    "vgpu_mps_active_thread_percentage": {
        "type": "int",
        "min": 1,
        "max": 100,
        "scope": "cluster",
        "why": "one ConfigMap for every node's device plugin",
        "old_names": [
            "vgpu_stack_mps_active_thread_percentage",
        ],
        "default": 100,
    },
    "vgpu_compute_shares": {
        "type": "bool",
        "scope": "cluster",
        "why": "one ConfigMap tells every device plugin and the extender whether shares exist",
        "old_names": [
            "vgpu_stack_compute_shares",
        ],
        "default": False,
    },
    "vgpu_compute_shares_total": {
        "type": "int",
        "min": 1,
        "max": 1000,
        "scope": "cluster",
        "why": "one ConfigMap: what the shares on any GPU may add up to",
        "old_names": [
            "vgpu_stack_compute_shares_total",
        ],
        "default": 100,
    },
    "vgpu_mps_pinned_memory_limit": {
        "type": "bool",
        "scope": "cluster",
        "why": "one ConfigMap for every node's device plugin",
        "old_names": [
            "vgpu_stack_mps_pinned_memory_limit",
        ],
        "default": True,
    },
    "vgpu_mps_set_exclusive_process": {
        "type": "bool",
        "only": False,
        "why_only": (
            "every GPU allocation has its own MPS server (docs/architecture.md), and a GPU in "
            "EXCLUSIVE_PROCESS mode takes one process; the GPUs stay in Default compute mode"
        ),
        "scope": "cluster",
        "why": "one nvidia-mps DaemonSet runs on every MPS node",
        "old_names": [
            "vgpu_stack_mps_set_exclusive_process",
        ],
        "default": False,
    },
    "vgpu_component_image": {
        "type": "str",
        "scope": "cluster",
        "why": "one DaemonSet per component runs it on every node",
        "old_names": [
            "vgpu_stack_image",
        ],
        "default": "localhost/vgpu-components:0.1.0",
    },
    "vgpu_component_image_import": {
        "type": "bool",
        "scope": "cluster",
        "why": "every node runs the same image, imported or pulled",
        "old_names": [
            "vgpu_stack_import_image",
        ],
        "default": True,
    },
    "vgpu_component_registry_credentials": {
        "type": "list",
        "elements": "dict",
        "scope": "cluster",
        "why": "one Secret per namespace pulls the image for every node",
        "old_names": [
            "vgpu_stack_registry_credentials",
        ],
        "default": [],
    },
    "vgpu_component_image_tarball": {
        "type": "str",
        "scope": "node",
        "old_names": [
            "vgpu_stack_image_tarball",
        ],
        "default": None,
    },
    "vgpu_nvidia_runtime_default": {
        "type": "bool",
        "scope": "cluster",
        "why": "a pod without runtimeClassName must get its GPU on whichever node it lands",
        "default": True,
    },
    "vgpu_graphics_enabled": {
        "type": "bool",
        "scope": "node",
        "default": False,
    },
    "vgpu_enforcement": {
        "type": "str",
        "choices": [
            "evict",
            "report",
        ],
        "scope": "cluster",
        "why": "one ConfigMap for every node's cgpu-monitor",
        "old_names": [
            "vgpu_stack_enforcement",
        ],
        "default": "evict",
    },
    "vgpu_enforcement_grace_seconds": {
        "type": "int",
        "min": 0,
        "max": 86400,
        "scope": "cluster",
        "why": "one ConfigMap for every node's cgpu-monitor",
        "old_names": [
            "vgpu_stack_enforcement_grace_seconds",
        ],
        "default": 30,
    },
    "vgpu_enforcement_termination_grace_seconds": {
        "type": "int",
        "min": 0,
        "max": 3600,
        "scope": "cluster",
        "why": "one ConfigMap for every node's cgpu-monitor",
        "old_names": [
            "vgpu_stack_enforcement_termination_grace_seconds",
        ],
        "default": 5,
    },
    "vgpu_enforcement_context_allowance_mib": {
        "type": "raw",
        "size": 0,
        "scope": "cluster",
        "why": "one ConfigMap for every node's cgpu-monitor",
        "old_names": [
            "vgpu_stack_enforcement_context_allowance_mib",
        ],
        "default": 512,
    },
    "vgpu_enforcement_unattributed_tolerance_mib": {
        "type": "raw",
        "size": 0,
        "scope": "cluster",
        "why": "one ConfigMap for every node's cgpu-monitor",
        "old_names": [
            "vgpu_stack_enforcement_unattributed_tolerance_mib",
        ],
        "default": 512,
    },
    "vgpu_sample_app_quota": {
        "type": "raw",
        "size": 1,
        "scope": "node",
        "old_names": [
            "vgpu_stack_sample_quota_mib",
        ],
        "default": "3000MiB",
    },
    "vgpu_sample_app_use": {
        "type": "raw",
        "size": 1,
        "scope": "node",
        "old_names": [
            "vgpu_stack_sample_use_mib",
        ],
        "default": "1200MiB",
    },
    "vgpu_tenant_pod_policy": {
        "type": "bool",
        "scope": "cluster",
        "why": "one admission policy serves the whole cluster",
        "default": True,
    },
    "vgpu_tenant_pod_policy_exempt_namespaces": {
        "type": "list",
        "elements": "str",
        "scope": "cluster",
        "why": "one admission policy serves the whole cluster",
        "default": [
            "kube-system",
        ],
    },
    "vgpu_tenant_pod_policy_off_reason": {
        "type": "str",
        "scope": "cluster",
        "why": "one admission policy serves the whole cluster",
        "default": "",
    },
    "vgpu_state_dir": {
        "type": "str",
        "scope": "cluster",
        "why": "one ConfigMap, and one DaemonSet per component mounts it on every node",
        "old_names": [
            "vgpu_stack_state_dir",
        ],
        "default": "/var/lib/vgpu",
    },
    "vgpu_kubelet_dir": {
        "type": "str",
        "scope": "cluster",
        "why": "one DaemonSet per component mounts kubelet's folders on every node",
        "old_names": [
            "vgpu_stack_kubelet_dir",
        ],
        "default": "/var/lib/kubelet",
    },
    "vgpu_mps_pipe_dir": {
        "type": "str",
        "scope": "cluster",
        "why": "one ConfigMap, and one DaemonSet per component mounts it on every node",
        "old_names": [
            "vgpu_stack_mps_pipe_dir",
        ],
        "default": "/run/nvidia/mps",
    },
    "vgpu_cdi_dir": {
        "type": "str",
        "scope": "cluster",
        "why": "one ConfigMap for every node's DRA driver",
        "old_names": [
            "vgpu_stack_cdi_dir",
        ],
        "default": "/var/run/cdi",
    },
    "vgpu_nvidia_cdi_dir": {
        "type": "str",
        "scope": "cluster",
        "why": "one ConfigMap for every node's DRA driver",
        "old_names": [
            "vgpu_stack_nvidia_cdi_dir",
        ],
        "default": "/etc/cdi",
    },
    "vgpu_device_plugin_healthz_port": {
        "type": "int",
        "min": 1,
        "max": 65535,
        "scope": "cluster",
        "why": "one ConfigMap for every node's device plugin",
        "old_names": [
            "vgpu_stack_device_plugin_healthz_port",
        ],
        "default": 9396,
    },
    "vgpu_monitor_port": {
        "type": "int",
        "min": 1,
        "max": 65535,
        "scope": "cluster",
        "why": "one ConfigMap, one headless Service and one scrape configuration for every node's cgpu-monitor",
        "old_names": [
            "vgpu_stack_monitor_port",
        ],
        "default": 9395,
    },
    "vgpu_mps_healthz_port": {
        "type": "int",
        "min": 1,
        "max": 65535,
        "scope": "cluster",
        "why": "one ConfigMap for every node's nvidia-mps",
        "old_names": [
            "vgpu_stack_mps_healthz_port",
        ],
        "default": 9397,
    },
    "vgpu_dra_healthz_port": {
        "type": "int",
        "min": 1,
        "max": 65535,
        "scope": "cluster",
        "why": "one ConfigMap for every node's DRA driver",
        "old_names": [
            "vgpu_stack_dra_healthz_port",
        ],
        "default": 9398,
    },
    "vgpu_log_format": {
        "type": "str",
        "choices": [
            "json",
            "text",
        ],
        "scope": "cluster",
        "why": "one ConfigMap for every component",
        "old_names": [
            "vgpu_stack_log_format",
        ],
        "default": "json",
    },
    "vgpu_switches": {
        "type": "dict",
        "switches": True,
        "scope": "cluster",
        "why": "one ConfigMap for every node's device plugin and DRA driver",
        "old_names": [
            "vgpu_stack_switches",
        ],
        "default": {
            "limit": 1,
            "gpu_virtual_memory": 1,
            "gpu_cgroup_enable": 0,
            "cgroup_map_mode": 0,
            "gpu_compute_audit": 0,
        },
    },
    "vgpu_extender_port": {
        "type": "int",
        "min": 1,
        "max": 65535,
        "scope": "cluster",
        "why": "one extender DaemonSet listens on it and every kube-scheduler calls it there",
        "old_names": [
            "vgpu_stack_extender_port",
        ],
        "default": 32766,
    },
    "vgpu_extender_tls": {
        "type": "bool",
        "scope": "cluster",
        "why": "one extender DaemonSet serves HTTPS or HTTP to every kube-scheduler",
        "old_names": [
            "vgpu_stack_extender_tls",
        ],
        "default": True,
    },
    "vgpu_extender_tls_dir": {
        "type": "str",
        "scope": "cluster",
        "why": "one extender DaemonSet mounts the certificates from the same folder on every node",
        "old_names": [
            "vgpu_stack_tls_dir",
        ],
        "default": "/etc/vgpu/tls",
    },
    "vgpu_extender_tls_ca_days": {
        "type": "int",
        "scope": "node",
        "old_names": [
            "vgpu_stack_tls_ca_days",
        ],
        "default": 3650,
    },
    "vgpu_extender_tls_cert_days": {
        "type": "int",
        "scope": "node",
        "old_names": [
            "vgpu_stack_tls_cert_days",
        ],
        "default": 365,
    },
    "vgpu_extender_tls_renew_days": {
        "type": "int",
        "scope": "node",
        "old_names": [
            "vgpu_stack_tls_renew_days",
        ],
        "default": 30,
    },
    "vgpu_extender_tls_install_python": {
        "type": "bool",
        "scope": "node",
        "old_names": [
            "vgpu_stack_tls_install_python",
        ],
        "default": True,
    },
    "vgpu_extender_http_timeout": {
        "type": "str",
        "scope": "cluster",
        "why": "every kube-scheduler of the cluster waits on the extender alike",
        "old_names": [
            "vgpu_stack_extender_http_timeout",
        ],
        "default": "10s",
    },
    "vgpu_extender_ignorable": {
        "type": "bool",
        "scope": "cluster",
        "why": "a GPU pod must not land differently by which kube-scheduler leads",
        "old_names": [
            "vgpu_stack_extender_ignorable",
        ],
        "default": False,
    },
    "vgpu_extender_packing": {
        "type": "str",
        "choices": [
            "tightest",
            "weighted",
        ],
        "scope": "cluster",
        "why": "a GPU pod must not land differently by which kube-scheduler leads",
        "old_names": [
            "vgpu_stack_extender_packing",
        ],
        "default": "tightest",
    },
    "vgpu_extender_weight": {
        "type": "int",
        "scope": "cluster",
        "why": "a GPU pod must not land differently by which kube-scheduler leads",
        "old_names": [
            "vgpu_stack_extender_weight",
        ],
        "default": 1,
    },
    "vgpu_scheduler_percentage_of_nodes_to_score": {
        "type": "int",
        "scope": "cluster",
        "why": "a GPU pod must not land differently by which kube-scheduler leads",
        "old_names": [
            "vgpu_stack_percentage_of_nodes_to_score",
        ],
        "default": 0,
    },
    "vgpu_scheduler_manage": {
        "type": "bool",
        "scope": "cluster",
        "why": "either the collection wires every kube-scheduler or the operator wires them all",
        "old_names": [
            "vgpu_stack_manage_scheduler",
        ],
        "default": True,
    },
    "vgpu_scheduler_config_path": {
        "type": "str",
        "scope": "cluster",
        "why": "kubeadm's ClusterConfiguration gives every kube-scheduler one --config path",
        "old_names": [
            "vgpu_stack_scheduler_config_path",
        ],
        "default": None,
    },
    "vgpu_scheduler_kubeconfig": {
        "type": "str",
        "scope": "node",
        "old_names": [
            "vgpu_stack_scheduler_kubeconfig",
        ],
        "default": None,
    },
    "vgpu_scheduler_health_timeout": {
        "type": "int",
        "scope": "node",
        "old_names": [
            "vgpu_stack_scheduler_health_timeout",
        ],
        "default": 180,
    },
    "vgpu_scheduler_health_url": {
        "type": "str",
        "scope": "node",
        "old_names": [
            "vgpu_stack_scheduler_health_url",
        ],
        "default": "https://127.0.0.1:10259/healthz",
    },
    "vgpu_force_unit_change": {
        "type": "bool",
        "scope": "node",
        "old_names": [
            "vgpu_stack_force_unit_change",
        ],
        "default": False,
    },
    "vgpu_stack_node_roles": {
        "type": "list",
        "elements": "str",
        "choices": [
            "nvidia_driver",
            "nvidia_container_runtime",
            "vgpu_interposer",
        ],
        "scope": "run",
        "default": [
            "nvidia_driver",
            "nvidia_container_runtime",
            "vgpu_interposer",
        ],
    },
    "vgpu_uninstall_cluster": {
        "type": "bool",
        "scope": "run",
        "default": False,
    },
    "vgpu_uninstall_driver": {
        "type": "bool",
        "scope": "run",
        "default": False,
    },
    "vgpu_verify_sample_app": {
        "type": "bool",
        "scope": "run",
        "default": True,
    },
}
# Old names, each read for one release: old -> new.
OLD_NAMES: dict[str, str] = {
    "vgpu_stack_flavour": "vgpu_kubernetes_flavour",
    "vgpu_stack_kubeconfig": "vgpu_kubeconfig",
    "vgpu_stack_driver_branch": "vgpu_driver_branch",
    "vgpu_stack_resource_prefix": "vgpu_resource_prefix",
    "vgpu_stack_scheduling": "vgpu_scheduling",
    "vgpu_stack_gpu_node_taint": "vgpu_gpu_node_taint",
    "vgpu_stack_unit_mib": "vgpu_memory_unit_mib",
    "vgpu_stack_reserved_mib": "vgpu_reserved_memory_mib",
    "vgpu_stack_install_prefix": "vgpu_install_prefix",
    "vgpu_stack_mps_enabled": "vgpu_mps_enabled",
    "vgpu_stack_mps_active_thread_percentage": "vgpu_mps_active_thread_percentage",
    "vgpu_stack_compute_shares": "vgpu_compute_shares",
    "vgpu_stack_compute_shares_total": "vgpu_compute_shares_total",
    "vgpu_stack_mps_pinned_memory_limit": "vgpu_mps_pinned_memory_limit",
    "vgpu_stack_mps_set_exclusive_process": "vgpu_mps_set_exclusive_process",
    "vgpu_stack_image": "vgpu_component_image",
    "vgpu_stack_import_image": "vgpu_component_image_import",
    "vgpu_stack_registry_credentials": "vgpu_component_registry_credentials",
    "vgpu_stack_image_tarball": "vgpu_component_image_tarball",
    "vgpu_stack_enforcement": "vgpu_enforcement",
    "vgpu_stack_enforcement_grace_seconds": "vgpu_enforcement_grace_seconds",
    "vgpu_stack_enforcement_termination_grace_seconds": "vgpu_enforcement_termination_grace_seconds",
    "vgpu_stack_enforcement_context_allowance_mib": "vgpu_enforcement_context_allowance_mib",
    "vgpu_stack_enforcement_unattributed_tolerance_mib": "vgpu_enforcement_unattributed_tolerance_mib",
    "vgpu_stack_sample_quota_mib": "vgpu_sample_app_quota",
    "vgpu_stack_sample_use_mib": "vgpu_sample_app_use",
    "vgpu_stack_state_dir": "vgpu_state_dir",
    "vgpu_stack_kubelet_dir": "vgpu_kubelet_dir",
    "vgpu_stack_mps_pipe_dir": "vgpu_mps_pipe_dir",
    "vgpu_stack_cdi_dir": "vgpu_cdi_dir",
    "vgpu_stack_nvidia_cdi_dir": "vgpu_nvidia_cdi_dir",
    "vgpu_stack_device_plugin_healthz_port": "vgpu_device_plugin_healthz_port",
    "vgpu_stack_monitor_port": "vgpu_monitor_port",
    "vgpu_stack_mps_healthz_port": "vgpu_mps_healthz_port",
    "vgpu_stack_dra_healthz_port": "vgpu_dra_healthz_port",
    "vgpu_stack_log_format": "vgpu_log_format",
    "vgpu_stack_switches": "vgpu_switches",
    "vgpu_stack_extender_port": "vgpu_extender_port",
    "vgpu_stack_extender_tls": "vgpu_extender_tls",
    "vgpu_stack_tls_dir": "vgpu_extender_tls_dir",
    "vgpu_stack_tls_ca_days": "vgpu_extender_tls_ca_days",
    "vgpu_stack_tls_cert_days": "vgpu_extender_tls_cert_days",
    "vgpu_stack_tls_renew_days": "vgpu_extender_tls_renew_days",
    "vgpu_stack_tls_install_python": "vgpu_extender_tls_install_python",
    "vgpu_stack_extender_http_timeout": "vgpu_extender_http_timeout",
    "vgpu_stack_extender_ignorable": "vgpu_extender_ignorable",
    "vgpu_stack_extender_packing": "vgpu_extender_packing",
    "vgpu_stack_extender_weight": "vgpu_extender_weight",
    "vgpu_stack_percentage_of_nodes_to_score": "vgpu_scheduler_percentage_of_nodes_to_score",
    "vgpu_stack_manage_scheduler": "vgpu_scheduler_manage",
    "vgpu_stack_scheduler_config_path": "vgpu_scheduler_config_path",
    "vgpu_stack_scheduler_kubeconfig": "vgpu_scheduler_kubeconfig",
    "vgpu_stack_scheduler_health_timeout": "vgpu_scheduler_health_timeout",
    "vgpu_stack_scheduler_health_url": "vgpu_scheduler_health_url",
    "vgpu_stack_force_unit_change": "vgpu_force_unit_change",
}
# Names no longer read, each with why: a deprecation for one release.
RETIRED: dict[str, str] = {
    "vgpu_stack_version": "the component image's tag and the collection's version name the release now",
}
