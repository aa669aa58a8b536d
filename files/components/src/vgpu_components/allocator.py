"""The device plugin's pure core: the unit table of the node's GPUs and GetPreferredAllocation.

No gRPC, NVML or Kubernetes here, so the rules are easy to test and to reuse from the benchmarks.
Which GPU a container's units come from is placement.py's rule, shared with the extender; what the
container gets for them is container.py's (the container contract), with MPS mps_contract.py's.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgpu_components import ids
from vgpu_components.memory_size import units_for
from vgpu_components.nvml import Gpu
from vgpu_components.placement import Ranking

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"


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
            slot = GpuUnits(gpu=gpu, key=key, units=units_for(gpu.total_mib, reserved_mib, unit_mib))
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
