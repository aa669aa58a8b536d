"""Placement: which one GPU of a node takes a request of `need` units.

The rule, for the extender (filter, prioritize, bind) and the device plugin
(GetPreferredAllocation) alike: a request takes all its units from one GPU; among the healthy GPUs
with at least `need` units free, the one with the most compute free wins, and among those equally
free the first in the policy's order. A compute share (docs/architecture.md, "Decision: the compute
share") then fits only where that GPU has it free.

Why compute first: kubelet asks the device plugin for a container's memory without its share
(each resource is asked for apart), so the rule cannot depend on the share. Taking the GPU with the
most compute free among those where the memory fits is the choice that never needs it: a share fits
there whenever it fits on any GPU where the memory fits. On a node without shares every GPU has the
same compute free and the rule is the policy's order alone.

Policies are named orders over (free units, GPU index), the way NVIDIA's device plugin names its
allocation policies; both components ask for the same name, so they pick the same GPU:

  best-fit  least free first, then the lowest index. Small requests pack together and the emptier
            GPUs stay whole for large requests. The default, and the only policy shipped.

A Ranking orders one node's GPUs once (after every change); each request then costs a bisection,
and a scan of the GPUs that fit where their compute free differs.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

# name -> sort key of a candidate (free units, GPU index); the first candidate that fits wins.
# A key must order by free units first (ascending) for the bisection in Ranking.pick to hold.
POLICIES: dict[str, Callable[[int, int], tuple[int, ...]]] = {
    "best-fit": lambda free, index: (free, index),
}
DEFAULT_POLICY = "best-fit"


class Ranking(Generic[T]):
    """One node's GPUs in a policy's order: (free units, GPU index, the caller's item) each, and
    `compute(item)`, the compute the GPU has free (all equal when not given)."""

    def __init__(
        self,
        candidates: Iterable[tuple[int, int, T]],
        policy: str = DEFAULT_POLICY,
        compute: Callable[[T], int] | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}; expected one of {sorted(POLICIES)}")
        key = POLICIES[policy]
        ordered = sorted(candidates, key=lambda c: key(c[0], c[1]))
        self.items: list[T] = [item for _free, _index, item in ordered]
        self.free: list[int] = [free for free, _index, _item in ordered]
        self.compute: list[int] = [compute(item) for item in self.items] if compute else [0] * len(self.items)
        self.uniform = len(set(self.compute)) <= 1  # then the policy's order alone decides
        # The GPU with the most free units (ties: the lowest index), for callers that must explain
        # why nothing fits.
        top = max(ordered, key=lambda c: (c[0], -c[1]), default=None)
        self.largest: T | None = top[2] if top is not None else None
        self.max_free = top[0] if top is not None else 0

    def pick(self, need: int) -> T | None:
        """The rule's GPU for `need` units, or None when no single GPU has them free."""
        at = bisect.bisect_left(self.free, need)
        if at >= len(self.items):
            return None
        if self.uniform:
            return self.items[at]
        best = at  # the first in the policy's order among those with the most compute free
        for i in range(at + 1, len(self.items)):
            if self.compute[i] > self.compute[best]:
                best = i
        return self.items[best]
