"""The device plugin's pure core: the unit table, GetPreferredAllocation and the Allocate contract.

No gRPC, NVML or Kubernetes here, so the rules are easy to test and to reuse from the benchmarks.
Which GPU a container's units come from is placement.py's rule, shared with the extender.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_components import contract, ids, kube, names, nvml, switches
from vgpu_components.mps import MpsRequest, new_serial, pipe_folder
from vgpu_components.nvml import Gpu
from vgpu_components.placement import Ranking

# The node's MPS setting (node_mps) is logged under the MPS name, whichever component reads it.
log = logging.getLogger("vgpu.mps")
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
# The NVIDIA runtime's device list as mounts (its accept-nvidia-visible-devices-as-volume-mounts):
# /dev/null mounted at <root>/<GPU UUID> gives a container that GPU. roles/nvidia_container_runtime
# makes it the only way an unprivileged container gets one (a pod can make a /dev/null mount only
# with a hostPath volume); NVIDIA_VISIBLE_DEVICES repeats the GPU for tools and for runtimes not
# configured so.
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"


class AllocationError(ValueError):
    """Allocate was asked for something it cannot honour; the message says what and why."""


@dataclass
class GpuUnits:
    """A GPU's share of the advertised units."""

    gpu: Gpu
    key: str
    units: int
    healthy: bool = True
    unhealthy_reason: str = ""

    def device_ids(self) -> list[str]:
        return [ids.device_id(self.key, n) for n in range(self.units)]


@dataclass(frozen=True)
class MpsContract:
    """What MPS adds to the container contract on this node (device_plugin.DevicePlugin decides):
    each allocation's own MPS daemon (mps.py), whose defaults carry the thread percentage and the
    pinned memory limit, so the container's environment holds nothing it could raise."""

    pipe_dir: str
    # With compute shares each container's <prefix>/gpu-cores Allocate sets its daemon's thread
    # percentage (before its memory Allocate, or right after it: shares.py pairs them); without,
    # and until then, every daemon gets thread_percentage.
    shares: bool = False
    thread_percentage: int = 100
    pinned_limit: bool = False  # the daemon's pinned device-memory limit = the quota (CUDA 11.5+)
    start_timeout_s: float = 10.0  # how long an allocation waits for its daemon (mps.wait_ready)


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


def mps_contract(
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


@dataclass
class Allocation:
    """What one container gets: env, mounts (container path, host path, read-only) and its files."""

    alloc_id: str
    gpu: Gpu
    units: int
    limit_mib: int
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    quota_text: str = ""
    region_host_dir: Path = Path()
    quota_host_file: Path = Path()
    mps_request: MpsRequest | None = None  # what its MPS daemon enforces (MPS nodes)


class DeviceTable:
    """GPU key -> GPU and units; the in-memory truth of what this node advertises."""

    def __init__(self, gpus: Sequence[Gpu], unit_mib: int, reserved_mib: int = 0) -> None:
        if unit_mib <= 0:
            raise ValueError(f"unit_mib must be positive, got {unit_mib}")
        self.unit_mib = unit_mib
        self.reserved_mib = reserved_mib
        self.lock = threading.Lock()
        self.by_key: dict[str, GpuUnits] = {}
        self.by_uuid: dict[str, GpuUnits] = {}
        for gpu in sorted(gpus, key=lambda g: g.index):
            key = ids.gpu_key(gpu.uuid)
            if key in self.by_key:
                other = self.by_key[key].gpu.uuid
                raise ValueError(f"GPU key collision: {gpu.uuid} and {other} both hash to {key}; cannot advertise")
            slot = GpuUnits(gpu=gpu, key=key, units=ids.units_for(gpu.total_mib, reserved_mib, unit_mib))
            self.by_key[key] = slot
            self.by_uuid[gpu.uuid] = slot

    def gpus(self) -> list[GpuUnits]:
        return sorted(self.by_key.values(), key=lambda s: s.gpu.index)

    def devices(self) -> list[tuple[str, str]]:
        """(device ID, health) for every unit, in GPU index order."""
        with self.lock:
            out: list[tuple[str, str]] = []
            for slot in self.gpus():
                health = HEALTHY if slot.healthy else UNHEALTHY
                out.extend((dev, health) for dev in slot.device_ids())
            return out

    def set_health(self, uuid: str, healthy: bool, reason: str = "") -> bool:
        """Mark a GPU healthy or not; True when that changed anything."""
        with self.lock:
            slot = self.by_uuid.get(uuid)
            if slot is None or slot.healthy == healthy:
                return False
            slot.healthy, slot.unhealthy_reason = healthy, reason
            return True

    def resolve(self, device_ids: Sequence[str]) -> GpuUnits:
        """The one GPU that all these IDs belong to; AllocationError otherwise."""
        if not device_ids:
            raise AllocationError("no device IDs in the request")
        if len(set(device_ids)) != len(device_ids):
            raise AllocationError(f"duplicate device IDs in the request: {sorted(device_ids)}")
        keys: set[str] = set()
        for dev in device_ids:
            try:
                key, unit = ids.parse_device_id(dev)
            except ValueError as exc:
                raise AllocationError(str(exc)) from None
            slot = self.by_key.get(key)
            if slot is None:
                raise AllocationError(f"device ID {dev!r} names GPU key {key!r}, which is not on this node")
            if unit >= slot.units:
                raise AllocationError(f"device ID {dev!r}: GPU {slot.gpu.uuid} has only {slot.units} units")
            keys.add(key)
        if len(keys) > 1:
            spread = ", ".join(sorted(f"{k} ({self.by_key[k].gpu.uuid})" for k in keys))
            raise AllocationError(
                f"a container's {len(device_ids)} units must come from one GPU, got units of {len(keys)} GPUs: {spread}"
            )
        return self.by_key[keys.pop()]

    def _known(self, device: str) -> bool:
        try:
            key, unit = ids.parse_device_id(device)
        except ValueError:
            return False
        return key in self.by_key and unit < self.by_key[key].units

    def preferred(
        self,
        available: Sequence[str],
        must_include: Sequence[str],
        size: int,
        compute_free: Mapping[str, int] | None = None,
    ) -> list[str]:
        """GetPreferredAllocation for one container: `size` units from one GPU, placed by the same
        rule as the extender's (placement.py), with `compute_free` the compute share free per GPU
        key on a node with compute shares.

        Units kubelet lists as available are free, so the free units per GPU are counted from them.
        """
        free: dict[str, list[tuple[int, str]]] = {}
        # kubelet sends every free unit of the node (thousands): a cheap split, not the full parse.
        for dev in available:
            key, _sep, unit = dev.partition("-")
            if key in self.by_key and unit.isdigit():
                free.setdefault(key, []).append((int(unit), dev))
        must = [d for d in dict.fromkeys(must_include) if self._known(d)]
        must_keys = {ids.parse_device_id(d)[0] for d in must}
        if len(must_keys) == 1:
            # Units kubelet insists on (reused from an init container) fix the GPU.
            key = next(iter(must_keys))
        else:
            ranking = Ranking(
                ((len(units), self.by_key[k].gpu.index, k) for k, units in free.items() if self.by_key[k].healthy),
                compute=(lambda k: compute_free.get(k, 0)) if compute_free is not None else None,
            )
            chosen = ranking.pick(size)
            if chosen is None:
                # No single GPU fits: hand back the largest so Allocate can explain the problem.
                if not free:
                    return must[:size]
                chosen = max(free, key=lambda k: (len(free[k]), -self.by_key[k].gpu.index))
            key = chosen
        picked = [d for d in must if d.startswith(key + "-")]
        for _unit, dev in sorted(free.get(key, [])):
            if len(picked) >= size:
                break
            if dev not in picked:
                picked.append(dev)
        return picked


def build_allocation(
    table: DeviceTable,
    device_ids: Sequence[str],
    cfg: Mapping[str, Any],
    mps: MpsContract | None = None,
    share: int | None = None,
) -> Allocation:
    """The container contract of docs/architecture.md for one container's device IDs; `mps` when
    MPS is on for the node, `share` the container's compute share when already allocated."""
    slot = table.resolve(device_ids)
    if not slot.healthy:
        raise AllocationError(f"GPU {slot.gpu.uuid} is unhealthy: {slot.unhealthy_reason or 'unknown reason'}")
    aid = ids.alloc_id(device_ids)
    return container_contract(slot.gpu, len(device_ids), table.unit_mib, aid, cfg, mps=mps, share=share)


def container_contract(
    gpu: Gpu,
    units: int,
    unit_mib: int,
    aid: str,
    cfg: Mapping[str, Any],
    *,
    mps: MpsContract | None = None,
    share: int | None = None,
) -> Allocation:
    """The container contract of docs/architecture.md: `units` units of `unit_mib` MiB of `gpu`,
    under the host paths of allocation `aid`, with `mps` when MPS is on for the node (and `share`,
    the container's compute share in percent, where it has one). The one implementation, for the
    device plugin's Allocate and the DRA driver's NodePrepareResources alike; its interposer
    switches are the device_plugin section's."""
    limit_mib = units * unit_mib
    plugin = cfg["device_plugin"]
    state_dir = Path(cfg["state_dir"])
    install_prefix = cfg["install_prefix"]
    values = plugin["switches"]
    envs = {
        "NVIDIA_VISIBLE_DEVICES": gpu.uuid,
        "CUDA_VISIBLE_DEVICES": "0",
        "VGPU_MEMORY_LIMIT": f"{limit_mib}MiB",
        "VGPU_CONFIG_FILE": contract.CONTAINER_QUOTA_FILE,
        "VGPU_REGION_DIR": contract.CONTAINER_REGION_DIR,
        "LD_LIBRARY_PATH": install_prefix,
        # Preloaded as well: a program that dlopens the real driver by its path (as `ldconfig -p`
        # lists it) still gets libvgpu's hooks through its dlsym (issue 24).
        "LD_PRELOAD": f"{install_prefix.rstrip('/')}/libvgpu.so",
    }
    for switch in switches.SWITCHES:
        envs[switch.env] = str(int(values[switch.key]))
    region_dir = state_dir / "containers" / aid
    quota_file = state_dir / "quotas" / f"{aid}.conf"
    mounts = [
        (install_prefix, install_prefix, True),
        (contract.CONTAINER_REGION_DIR, str(region_dir), False),
        (contract.CONTAINER_QUOTA_FILE, str(quota_file), True),
        (f"{DEVICE_LIST_ROOT}/{gpu.uuid}", "/dev/null", True),
    ]
    mps_request = None
    if mps is not None:
        # The allocation's own daemon (mps.py) holds its share and its pinned limit (the quota, the
        # driver's own limit under libvgpu's) as the defaults of every server it starts: no variable
        # the container sets raises them. Its pipe folder alone, read-only (a client only connects
        # to the daemon's sockets: tests/gpu/mps_readonly_pipe.sh, on the H200), at mps.pipe_dir.
        envs["CUDA_MPS_PIPE_DIRECTORY"] = mps.pipe_dir
        mounts.append((mps.pipe_dir, str(pipe_folder(mps.pipe_dir, aid)), True))
        percentage = share if share is not None else mps.thread_percentage
        pinned = limit_mib if mps.pinned_limit else None
        mps_request = MpsRequest(aid, gpu.uuid, percentage, pinned, new_serial())
    lines = [
        f"# vgpu quota for allocation {aid} on GPU {gpu.uuid}",
        f"memory_limit=0:{limit_mib}MiB",
        *(f"{switch.key}={int(values[switch.key])}" for switch in switches.SWITCHES),
    ]
    return Allocation(
        alloc_id=aid,
        gpu=gpu,
        units=units,
        limit_mib=limit_mib,
        envs=envs,
        mounts=mounts,
        quota_text="\n".join(lines) + "\n",
        region_host_dir=region_dir,
        quota_host_file=quota_file,
        mps_request=mps_request,
    )
