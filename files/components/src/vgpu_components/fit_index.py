"""The nodes where a request size fits, grouped by packing score: filter's answer from a lookup
per node name and set operations, instead of judging each node again for each pod.

The rule is ClusterModel's (scheduling.py): a pod of `units` without a compute share fits a node
without shares where one GPU has `units` free, and among such nodes filter-tightest keeps those
with the highest packing score. kube-scheduler sends every feasible node's name with each pod
(1000 and more), and judging them one by one was a fifth of the extender's interpreter lock per
pod on the 16-core host (docs/benchmarks.md), on kube-scheduler's serial cycle. A bind or a pod
event changes one node, so an index per request size is brought up to date, at the next request of
that size, from the nodes changed since.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

# Request sizes indexed at once; the least recently asked is dropped beyond (rebuilt if asked again).
MAX_SIZES = 8
# Up to this many of the tightest nodes are put in kube-scheduler's order by a search each (in C);
# more by one pass over the names.
ORDER_BY_INDEX = 8


class Node(Protocol):
    """What the index reads of a node's state (scheduling.NodeState)."""

    @property
    def shares(self) -> bool: ...

    @property
    def max_free(self) -> int: ...

    def score(self, units: int) -> int: ...


class FitIndex:
    """For one request size: the nodes where it fits and their score, and the nodes by score."""

    def __init__(self, units: int, changed: Iterable[str]) -> None:
        self.units = units
        self.score_of: dict[str, int] = {}
        self.by_score: dict[int, set[str]] = {}
        self.changed: set[str] = set(changed)  # nodes to look at again before the next answer

    def update(self, nodes: Mapping[str, Node]) -> None:
        for name in self.changed:
            old = self.score_of.pop(name, None)
            if old is not None:
                level = self.by_score[old]
                level.discard(name)
                if not level:
                    del self.by_score[old]
            state = nodes.get(name)
            if state is not None and not state.shares and state.max_free >= self.units:
                score = state.score(self.units)
                self.score_of[name] = score
                self.by_score.setdefault(score, set()).add(name)
        self.changed.clear()

    def tightest(self, names: list[str]) -> list[str]:
        """Of `names`, those with the highest score, in the order given. Names not in the index
        have no score: the caller passes only nodes where the size fits."""
        wanted = set(names)
        for score in sorted(self.by_score, reverse=True):
            level = self.by_score[score]
            if level.isdisjoint(wanted):
                continue
            hits = level & wanted
            if len(hits) == len(names):
                return list(names)
            if len(hits) <= ORDER_BY_INDEX:
                return sorted(hits, key=names.index)
            return [name for name in names if name in hits]
        return []


class FitIndexes:
    """The indexes of the request sizes asked lately, told of every node that changes."""

    def __init__(self, nodes: Callable[[], Mapping[str, Node]]) -> None:
        self._nodes = nodes
        self._by_units: dict[int, FitIndex] = {}  # least recently asked first

    def changed(self, name: str) -> None:
        for index in self._by_units.values():
            index.changed.add(name)

    def clear(self) -> None:
        """Every node changed (a relist): the indexes are rebuilt when next asked."""
        self._by_units.clear()

    def get(self, units: int) -> FitIndex:
        nodes = self._nodes()
        index = self._by_units.pop(units, None)
        if index is None:
            index = FitIndex(units, nodes)
            if len(self._by_units) >= MAX_SIZES:
                del self._by_units[next(iter(self._by_units))]
        self._by_units[units] = index
        index.update(nodes)
        return index

    def admitted(self, names: list[str], units: int) -> list[str]:
        """The names where `units` fit, in the order given."""
        fits = self.get(units).score_of
        return [name for name in names if name in fits]

    def tightest(self, names: list[str], units: int) -> list[str]:
        """Of `names`, all where `units` fit, those where they pack tightest, in the order given."""
        return self.get(units).tightest(names)
