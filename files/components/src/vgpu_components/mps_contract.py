"""What MPS adds to the container contract on a node (docs/architecture.md, "Decision: an MPS server
per allocation"): each allocation's own MPS daemon (mps_requests.py), whose defaults carry the thread
percentage and the pinned memory limit, so the container's environment holds nothing it could raise.
The device plugin's Allocate and the DRA driver's prepare decide it alike (for_node), and the node's
<prefix>/mps label says whether MPS is on for the node (node_mps)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from vgpu_components import kube, names, nvml

# The node's MPS setting (node_mps) is logged under the MPS name, whichever component reads it.
log = logging.getLogger("vgpu.mps")


@dataclass(frozen=True)
class MpsContract:
    """What MPS adds to the container contract on this node (plugin.DevicePlugin decides):
    each allocation's own MPS daemon (mps_requests.py), whose defaults carry the thread percentage and the
    pinned memory limit, so the container's environment holds nothing it could raise."""

    pipe_dir: str
    # With compute shares each container's <prefix>/gpu-cores Allocate sets its daemon's thread
    # percentage (before its memory Allocate, or right after it: shares.py pairs them); without,
    # and until then, every daemon gets thread_percentage.
    shares: bool = False
    thread_percentage: int = 100
    pinned_limit: bool = False  # the daemon's pinned device-memory limit = the quota (CUDA 11.5+)
    start_timeout_s: float = 10.0  # how long an allocation waits for its daemon (mps_requests.wait_ready)


# CUDA_MPS_PINNED_DEVICE_MEM_LIMIT came with CUDA 11.5; R470 drivers support CUDA 11.4.
PINNED_LIMIT_CUDA = 11050


def pinned_limit(cfg: dict[str, Any], backend: nvml.GpuBackend | None) -> tuple[bool, str]:
    """Whether the allocations' MPS daemons get a pinned device-memory limit (the quota) here, and
    why (for the log)."""
    if not cfg["device_plugin"]["mps_pinned_memory_limit"]:
        return False, "off (device_plugin.mps_pinned_memory_limit is false)"
    try:
        version = backend.cuda_driver_version() if backend is not None else 0
    except Exception as exc:
        return False, f"off: the driver's CUDA version is unknown ({exc})"
    found = f"{version // 1000}.{version % 1000 // 10}" if version else "unknown"
    if version < PINNED_LIMIT_CUDA:
        return False, (
            f"off: the driver supports CUDA {found}; CUDA_MPS_PINNED_DEVICE_MEM_LIMIT needs CUDA 11.5 or newer "
            "(R470 is CUDA 11.4), so libvgpu alone limits GPU memory"
        )
    return True, f"on (driver CUDA {found}): the driver refuses a client's allocations past its quota"


def for_node(
    cfg: dict[str, Any], backend: nvml.GpuBackend | None, logger: logging.Logger, *, shares: bool = False
) -> MpsContract | None:
    """What MPS adds to the containers of this node (None: MPS is off here), for both scheduling
    paths: the device plugin's Allocate and the DRA driver's prepare give the same. `shares`: the
    thread percentage comes with each container's <prefix>/gpu-cores (the extender path only). The
    pinned limit's decision goes to the caller's log."""
    section = cfg["device_plugin"]
    if not section["mps_enabled"]:
        return None
    pinned, why = pinned_limit(cfg, backend)
    logger.info("MPS pinned device-memory limit %s", why)
    return MpsContract(
        pipe_dir=cfg["mps"]["pipe_dir"],
        shares=shares,
        thread_percentage=int(section["mps_active_thread_percentage"]),
        pinned_limit=pinned,
        start_timeout_s=float(cfg["mps"]["start_timeout_s"]),
    )


def node_mps(cfg: dict[str, Any], node_api: kube.NodeApi | None, node: str) -> None:
    """MPS is on for this node where its `<prefix>/mps` label says so (roles/vgpu_stack sets it per
    node, and the nvidia-mps DaemonSet runs only there); without the label, the config decides."""
    key = names.label(cfg["resource_prefix"], "mps")
    try:
        labels = node_api.node_labels(node) if node_api is not None else {}
    except Exception as exc:
        log.warning("could not read the labels of node %s (%s); MPS as the config says", node, exc)
        return
    if labels.get(key) in ("true", "false"):
        cfg["device_plugin"]["mps_enabled"] = labels[key] == "true"
        log.info("MPS is %s on this node (label %s)", "on" if labels[key] == "true" else "off", key)
