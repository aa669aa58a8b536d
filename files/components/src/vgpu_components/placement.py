"""Placement: which one GPU of a node takes a request of `need` units.

The rule, for the extender (filter, prioritize, bind) and the device plugin
(GetPreferredAllocation) alike: a request takes all its units from one GPU; among the healthy GPUs
with at least `need` units free, the first in the policy's order wins.

Policies are named orders over (free units, GPU index), the way NVIDIA's device plugin names its
allocation policies; both components ask for the same name, so they pick the same GPU:

  best-fit  least free first, then the lowest index. Small requests pack together and the emptier
            GPUs stay whole for large requests. The default, and the only policy shipped.

A Ranking orders one node's GPUs once (after every change); each request then costs a bisection.
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
    """One node's GPUs in a policy's order: (free units, GPU index, the caller's item) each."""

    def __init__(self, candidates: Iterable[tuple[int, int, T]], policy: str = DEFAULT_POLICY) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown placement policy {policy!r}; expected one of {sorted(POLICIES)}")
        key = POLICIES[policy]
        ordered = sorted(candidates, key=lambda c: key(c[0], c[1]))
        self.items: list[T] = [item for _free, _index, item in ordered]
        self.free: list[int] = [free for free, _index, _item in ordered]
        # The GPU with the most free units (ties: the lowest index), for callers that must explain
        # why nothing fits.
        top = max(ordered, key=lambda c: (c[0], -c[1]), default=None)
        self.largest: T | None = top[2] if top is not None else None
        self.max_free = top[0] if top is not None else 0

    def pick(self, need: int) -> T | None:
        """The policy's GPU for `need` units, or None when no single GPU has them free."""
        at = bisect.bisect_left(self.free, need)
        return self.items[at] if at < len(self.items) else None
