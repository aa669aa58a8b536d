"""The paths, ports and limits the components, the containers and the roles agree on
(docs/architecture.md), each defined once. The config defaults (config.py) and the container
contract (allocator.py) use these names; roles/vgpu_stack renders the same values."""

from __future__ import annotations

KUBELET_DIR = "/var/lib/kubelet"
DEVICE_PLUGIN_DIR = f"{KUBELET_DIR}/device-plugins"
POD_RESOURCES_SOCKET = f"{KUBELET_DIR}/pod-resources/kubelet.sock"
MPS_PIPE_DIR = "/run/nvidia/mps"
CONTAINER_REGION_DIR = "/var/run/vgpu"  # where a container sees its region folder
CONTAINER_QUOTA_FILE = "/etc/vgpu/quota.conf"  # where a container sees its quota file
MONITOR_PORT = 9395
DEVICE_PLUGIN_HEALTHZ_PORT = 9396
MPS_HEALTHZ_PORT = 9397
DRA_HEALTHZ_PORT = 9398
EXTENDER_PORT = 32766
MAX_SHARE = 100  # a container's compute share (<prefix>/gpu-cores) is a percentage of one GPU
MAX_CORES_PER_GPU = 1000  # shares of one GPU may add up to ten times the GPU at most
