"""Preemption: which lower-priority pods to evict from a node so that a pod's memory fits one GPU.

The rule, for the extender's preempt verb (kube-scheduler asks it for each node where evicting
pods would free enough of the node's memory as a whole): a request takes all its units from one
GPU (placement.py), so only pods on one GPU can make room for it. For each healthy GPU, the victims
are the fewest pods of strictly lower priority on that GPU whose units (and compute share, on a
node with shares) make the request fit there; among the GPUs, the set kube-scheduler would prefer
wins:

  1. fewer PodDisruptionBudget violations (a victim is `protected` when a budget that selects it
     allows no disruption now),
  2. then fewer victims,
  3. then lower priority: the highest priority among the victims as low as it can be, then the
     sum of their priorities, then the lowest GPU index.

A pod of equal or higher priority is never a victim, and a pod on a GPU that is not chosen is never
part of the set: evicting it would free node-level memory the request cannot use. For a request of
`count` GPUs (each with `units` free), the `count` GPUs with the best sets are chosen and their
sets joined. When no GPU can be freed, the answer is the reason, in words a user reads in the
pod's events and the extender's log.

With compute shares the sets are searched by memory first (largest pods first within each
priority bound): a set that frees the share only through smaller pods may be missed, never a set
returned that does not free it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Gpu:
    """One GPU of the node as the placement model counts it."""

    index: int
    uuid: str
    units: int  # total
    used: int  # units held now, by the pods below and any the model cannot name
    healthy: bool = True
    cores: int = 0  # what the compute shares may add up to; 0: the node has no shares
    cores_used: int = 0


@dataclass(frozen=True)
class Resident:
    """A pod placed on one of the node's GPUs."""

    uid: str
    name: str  # namespace/name, for reasons
    priority: int
    units: int
    gpu: str  # uuid
    cores: int = 0
    protected: bool = False  # a PodDisruptionBudget selecting it allows no disruption now


@dataclass(frozen=True)
class Victims:
    """The chosen set: the pods to evict, the GPUs they free and how many budgets it violates."""

    pods: tuple[Resident, ...]
    gpus: tuple[Gpu, ...]

    @property
    def violations(self) -> int:
        return sum(1 for p in self.pods if p.protected)


@dataclass(frozen=True)
class Refusal:
    """No set of victims frees the request: why, per GPU."""

    reason: str


def choose(
    gpus: Sequence[Gpu],
    residents: Iterable[Resident],
    *,
    priority: int,
    units: int,
    cores: int = 0,
    count: int = 1,
    unit_mib: int = 1,
) -> Victims | Refusal:
    """The rule's victims for a pod of `priority` asking `units` (and `cores` percent) on each of
    `count` GPUs of this node, or why there are none. An empty set means it fits already."""
    pods = list(residents)
    candidates: list[tuple[tuple[int, int, int, int, int], Gpu, tuple[Resident, ...]]] = []
    why: list[str] = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        if not gpu.healthy:
            why.append(f"GPU {gpu.index} is unhealthy")
            continue
        lower = [p for p in pods if p.gpu == gpu.uuid and p.priority < priority]
        found = _cheapest(gpu, lower, units, cores, unit_mib)
        if isinstance(found, str):
            why.append(f"GPU {gpu.index} {found}")
            continue
        key = (
            sum(1 for p in found if p.protected),
            len(found),
            max((p.priority for p in found), default=0),
            sum(p.priority for p in found),
            gpu.index,
        )
        candidates.append((key, gpu, found))
    if len(candidates) < count:
        what = f"{units * unit_mib} MiB" + (f" and {cores} % compute" if cores else "")
        where = "on no GPU" if not candidates else f"on {len(candidates)} GPU(s), {count} needed"
        return Refusal(f"evicting pods of priority below {priority} frees {what} {where}: " + "; ".join(why))
    candidates.sort(key=lambda c: c[0])
    chosen = candidates[:count]
    return Victims(
        tuple(p for _key, _gpu, found in chosen for p in found),
        tuple(gpu for _key, gpu, _found in chosen),
    )


def _cheapest(gpu: Gpu, lower: list[Resident], units: int, cores: int, unit_mib: int) -> tuple[Resident, ...] | str:
    """The best set of `lower` whose eviction frees `units` (and `cores`) on `gpu`, or why none."""
    short_units = units - (gpu.units - gpu.used)
    short_cores = cores - (gpu.cores - gpu.cores_used) if cores else 0
    if short_units <= 0 and short_cores <= 0:
        return ()
    why = _beyond_reach(gpu, lower, units, cores, unit_mib)
    if why:
        return why
    free = [p for p in lower if not p.protected]
    held = [p for p in lower if p.protected]
    levels = sorted({p.priority for p in lower})
    for violations in range(len(held) + 1):
        for size in range(violations, len(lower) + 1):
            # The lowest priority bound under which `violations` protected pods and `size` in all
            # free the GPU; the largest pods first under that bound.
            for bound in levels:
                pick = _largest(held, violations, bound) + _largest(free, size - violations, bound)
                if len(pick) == size and _frees(pick, short_units, short_cores):
                    return tuple(sorted(pick, key=lambda p: (p.priority, -p.units, p.uid)))
    return "cannot be freed by pods of lower priority"  # not reached: all of `lower` frees it


def _beyond_reach(gpu: Gpu, lower: list[Resident], units: int, cores: int, unit_mib: int) -> str:
    """Why evicting all of `lower` still leaves the request short on `gpu` ("" when it does not)."""
    if units > gpu.units:
        return f"has {gpu.units * unit_mib} MiB in all"
    if cores and cores > gpu.cores:
        return f"has {gpu.cores} % compute in all"
    after = f"after evicting its {len(lower)} pod(s) of lower priority"
    short_units = units - (gpu.units - gpu.used) - sum(p.units for p in lower)
    if short_units > 0:
        return f"would still be {short_units * unit_mib} MiB short {after}"
    short_cores = (cores - (gpu.cores - gpu.cores_used) - sum(p.cores for p in lower)) if cores else 0
    if short_cores > 0:
        return f"would still be {short_cores} % compute short {after}"
    return ""


def _largest(pods: list[Resident], how_many: int, bound: int) -> list[Resident]:
    eligible = sorted((p for p in pods if p.priority <= bound), key=lambda p: (-p.units, -p.cores, p.priority, p.uid))
    return eligible[:how_many]


def _frees(pods: list[Resident], short_units: int, short_cores: int) -> bool:
    return sum(p.units for p in pods) >= short_units and sum(p.cores for p in pods) >= short_cores


# --- PodDisruptionBudgets, as kube-scheduler counts them (pkg/scheduler/framework/preemption) -----
def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Does a PodDisruptionBudget's label selector select a pod with `labels`? An empty or missing
    selector selects nothing here, as in kube-scheduler's count of violations."""
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return False
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(
        _OPERATORS.get(e.get("operator", ""), lambda _key, _values, _labels: False)(
            e.get("key", ""), e.get("values") or [], labels
        )
        for e in selector.get("matchExpressions") or []
    )


# matchExpressions' operators; an unknown one selects nothing, as an invalid selector would.
_OPERATORS: dict[str, Callable[[str, list[str], Mapping[str, str]], bool]] = {
    "In": lambda key, values, labels: labels.get(key) in values,
    "NotIn": lambda key, values, labels: key not in labels or labels[key] not in values,
    "Exists": lambda key, values, labels: key in labels,
    "DoesNotExist": lambda key, values, labels: key not in labels,
}


def _budgets_of(pod: Mapping[str, Any], budgets: Iterable[Mapping[str, Any]]) -> list[int]:
    """Indexes of the budgets that count `pod`: same namespace, selected, not already disrupted."""
    meta = pod.get("metadata") or {}
    namespace, name, labels = meta.get("namespace"), meta.get("name"), meta.get("labels") or {}
    found = []
    for index, budget in enumerate(budgets):
        if (budget.get("metadata") or {}).get("namespace") != namespace:
            continue
        if not selects((budget.get("spec") or {}).get("selector"), labels):
            continue
        if name in ((budget.get("status") or {}).get("disruptedPods") or {}):
            continue  # kube-scheduler counts a pod already being disrupted once only
        found.append(index)
    return found


def protected(pod: Mapping[str, Any], budgets: Sequence[Mapping[str, Any]]) -> bool:
    """Would evicting `pod` alone violate a budget (one that selects it allows no disruption now)?"""
    return any(_allowed(budgets[i]) <= 0 for i in _budgets_of(pod, budgets))


def violations(victims: Iterable[Mapping[str, Any]], budgets: Sequence[Mapping[str, Any]]) -> int:
    """How many of `victims` evicting them all violates, counted as kube-scheduler does: each victim
    a budget selects takes one of its status.disruptionsAllowed; a victim that finds one used up
    is a violation."""
    allowed = [_allowed(b) for b in budgets]
    count = 0
    for pod in victims:
        violating = False
        for index in _budgets_of(pod, budgets):
            allowed[index] -= 1
            violating = violating or allowed[index] < 0
        count += violating
    return count


def _allowed(budget: Mapping[str, Any]) -> int:
    value = (budget.get("status") or {}).get("disruptionsAllowed")
    return value if isinstance(value, int) else 0
