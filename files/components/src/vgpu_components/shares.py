"""Compute shares: `<prefix>/gpu-cores`, a container's share of one GPU's SMs in percent, which MPS
enforces as the default active thread percentage of the container's own MPS daemon (mps_requests.py;
docs/architecture.md, "Decision: the compute share").

Tokens: `cores-<n>`, cores_per_gpu of them per GPU and tied to none: a share's GPU is the GPU of
the container's memory units. An Allocate of n tokens gives the container the percentage n.

The ledger answers what GetPreferredAllocation's rule (placement.py) needs: the compute taken per
GPU. kubelet's PodResources says it for the containers it lists (memory IDs and tokens side by
side), but it lists a container only some time after its Allocates. Until then the ledger pairs the
Allocates itself: kubelet allocates a container's resources one after the other, in either order,
before it starts on the next container; and on a node with shares every GPU container has a share
(the extender places no other there), so a memory Allocate and the tokens Allocate next to it are
one container's. A memory Allocate followed by another memory Allocate (a pod that bypassed the
extender, or an admission kubelet gave up half-way) pairs with nothing and is dropped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vgpu_components import contract, ids
from vgpu_components.allocator import HEALTHY, UNHEALTHY, AllocationError


class ShareTokens:
    """The node's `<prefix>/gpu-cores` devices: cores_per_gpu per GPU."""

    def __init__(self, gpus: int, cores_per_gpu: int) -> None:
        self.gpus = gpus
        self.cores_per_gpu = cores_per_gpu
        self.count = gpus * cores_per_gpu

    def devices(self, healthy_gpus: int, mps_ready: bool) -> list[tuple[str, str]]:
        """(ID, health) of every token: those of unhealthy GPUs, and all while the MPS daemon is
        not ready (a share would not be enforced), are Unhealthy, so kubelet admits no more."""
        healthy = healthy_gpus * self.cores_per_gpu if mps_ready else 0
        return [(ids.share_id(n), HEALTHY if n < healthy else UNHEALTHY) for n in range(self.count)]

    def share(self, device_ids: Sequence[str]) -> int:
        """The share these tokens make (their number); AllocationError when they cannot be one."""
        if not device_ids:
            raise AllocationError("no device IDs in the request")
        if len(set(device_ids)) != len(device_ids):
            raise AllocationError(f"duplicate device IDs in the request: {sorted(device_ids)}")
        for dev in device_ids:
            try:
                n = ids.parse_share_id(dev)
            except ValueError as exc:
                raise AllocationError(str(exc)) from None
            if n >= self.count:
                raise AllocationError(f"device ID {dev!r}: this node has only {self.count} compute share units")
        if len(device_ids) > contract.MAX_SHARE:
            raise AllocationError(
                f"a container's compute share is a percentage of one GPU (1-{contract.MAX_SHARE}), "
                f"got {len(device_ids)}"
            )
        return len(device_ids)


@dataclass(frozen=True)
class Holder:
    """One container as PodResources lists it: its memory allocation and its share tokens."""

    alloc_id: str  # of its memory device IDs
    gpu_key: str
    share: int


def holders(containers: Iterable[tuple[Sequence[str], Sequence[str]]]) -> list[Holder]:
    """(memory IDs, share IDs) per container -> Holders; containers without memory are left out."""
    out = []
    for memory, cores in containers:
        if not memory:
            continue
        try:
            key = ids.parse_device_id(memory[0])[0]
        except ValueError:
            continue
        out.append(Holder(ids.alloc_id(memory), key, len(cores)))
    return out


class ShareLedger:
    """Compute taken per GPU key: PodResources' containers and the Allocates it does not list yet."""

    def __init__(self, unlisted_ttl_s: float = 60.0) -> None:
        self.unlisted_ttl_s = unlisted_ttl_s
        self.lock = threading.Lock()
        self.listed: dict[str, Holder] = {}  # alloc-id -> container, from the latest read
        self.recent: dict[str, tuple[Holder, float]] = {}  # paired here, not yet listed with its share
        self._memory: tuple[str, str] | None = None  # (alloc-id, GPU key) waiting for its share
        self._share: int | None = None  # a share waiting for its memory

    # --- Allocates, in kubelet's order ----------------------------------------------------------
    def memory_allocated(self, alloc_id: str, gpu_key: str) -> None:
        with self.lock:
            if self._share is not None:
                self._add(Holder(alloc_id, gpu_key, self._share))
                self._share = None
            else:
                self._memory = (alloc_id, gpu_key)  # an earlier one still waiting had no share

    def share_allocated(self, share: int) -> Holder | None:
        """A share's Allocate; the container it pairs with when its memory came first."""
        with self.lock:
            if self._memory is not None:
                holder = Holder(*self._memory, share)
                self._add(holder)
                self._memory = None
                return holder
            self._share = share
            return None

    def pending_share(self) -> int | None:
        """The share a memory Allocate now would pair with (kubelet allocated it first)."""
        with self.lock:
            return self._share

    def forget_pending(self) -> None:
        """After a refused or ambiguous Allocate: nothing waits for a partner any more."""
        with self.lock:
            self._memory, self._share = None, None

    def _add(self, holder: Holder) -> None:
        self.recent[holder.alloc_id] = (holder, time.monotonic())

    # --- PodResources ---------------------------------------------------------------------------
    def observe(self, listed: Iterable[Holder], now: float | None = None) -> None:
        """A fresh PodResources read: it is the truth for the containers it lists with a share;
        paired Allocates it still does not list are dropped after unlisted_ttl_s."""
        now = time.monotonic() if now is None else now
        with self.lock:
            self.listed = {h.alloc_id: h for h in listed}
            for alloc_id, (_holder, since) in list(self.recent.items()):
                seen = self.listed.get(alloc_id)
                if (seen is not None and seen.share) or now - since > self.unlisted_ttl_s:
                    del self.recent[alloc_id]

    def used(self) -> dict[str, int]:
        """Percent of each GPU (by key) the shares take."""
        with self.lock:
            used: dict[str, int] = {}
            for holder in [*self.listed.values(), *(h for h, _since in self.recent.values())]:
                used[holder.gpu_key] = used.get(holder.gpu_key, 0) + holder.share
            return used
