"""The scheduler extender's per-GPU model of the cluster (pure: no HTTP, no API client).

Per GPU, used units = max(what the node's device plugin published in the `<prefix>/gpus`
annotation, the units of pods the extender placed there and that still run or wait to start).
The annotation is kubelet's truth but lags by a few seconds; the pod side covers binds that
kubelet has not allocated yet. Taking the larger never over-admits.

Compute shares (`<prefix>/gpu-cores`, percent of one GPU) are counted the same way, per GPU, on the
nodes whose annotation gives each GPU `cores`: there every GPU container asks for a share, and the
shares on one GPU add up to `cores` at most (100, or more where oversubscription is configured).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from vgpu_components import contract, gpus_annotation, names
from vgpu_components.fit_index import FitIndexes
from vgpu_components.placement import Ranking
from vgpu_components.quantity import whole_number

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass
class GpuState:
    uuid: str
    index: int
    units: int
    published_used: int
    healthy: bool
    placed: int = 0  # units of pods the extender knows are on this GPU
    cores: int = 0  # what the compute shares on this GPU may add up to; 0: the node has no shares
    published_cores: int = 0
    placed_cores: int = 0

    @property
    def used(self) -> int:
        return max(self.published_used, self.placed)

    @property
    def free(self) -> int:
        return max(0, self.units - self.used) if self.healthy else 0

    @property
    def cores_free(self) -> int:
        used = max(self.published_cores, self.placed_cores)
        return max(0, self.cores - used) if self.healthy else 0


@dataclass
class NodeState:
    name: str
    unit_mib: int
    gpus: list[GpuState]
    max_free: int = 0
    max_units: int = 0
    shares: bool = False  # its GPUs are shared by compute share too (its device plugin says so)
    # The healthy GPUs in placement order (placement.py), rebuilt after every change.
    ranking: Ranking[GpuState] = field(default_factory=lambda: Ranking(()))
    # prioritize's score per request size. A bind changes one node, so the next pod of the same
    # size finds every other node's score here instead of recomputing it.
    scores: dict[int, int] = field(default_factory=dict)
    source: str = ""  # the annotation this state was read from

    def refresh(self) -> None:
        """Recompute the summaries after any change; requests then cost O(log GPUs)."""
        self.scores.clear()
        healthy = [g for g in self.gpus if g.healthy]
        self.ranking = Ranking(((g.free, g.index, g) for g in healthy), compute=lambda g: g.cores_free)
        self.max_free = self.ranking.max_free
        self.max_units = max((g.units for g in healthy), default=0)
        self.shares = any(g.cores for g in self.gpus)

    def score(self, units: int) -> int:
        """0..10 bin-packing score of the placed GPU for `units` (0 when none fits)."""
        cached = self.scores.get(units)
        if cached is None:
            gpu = self.ranking.pick(units) if units else None
            cached = round(10 * (gpu.used + units) / gpu.units) if gpu is not None and gpu.units else 0
            self.scores[units] = cached
        return cached

    def gpu(self, uuid: str) -> GpuState | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


@dataclass
class Placement:
    uid: str
    namespace: str
    name: str
    node: str
    gpu_uuid: str
    units: int
    cores: int = 0
    reserved_at: float | None = None  # monotonic time of our bind; None once seen bound
    bound_at: float | None = None  # monotonic time our bind's POST succeeded (the API lists it since)


class Placements(MutableMapping[str, Placement]):
    """The placements by pod UID, also kept by node: a pod event recounts its node's GPUs from the
    pods on that node alone, so its cost does not grow with the cluster (a scan of every placement
    took 0.5 ms of CPU an event at 5000 nodes x 10 pods; bench/extender_watch.py)."""

    def __init__(self, items: Iterable[tuple[str, Placement]] = ()) -> None:
        self._all: dict[str, Placement] = {}
        self._by_node: dict[str, dict[str, Placement]] = {}
        for uid, placement in items:
            self[uid] = placement

    def __getitem__(self, uid: str) -> Placement:
        return self._all[uid]

    def __setitem__(self, uid: str, placement: Placement) -> None:
        if uid in self._all:
            del self[uid]
        self._all[uid] = placement
        self._by_node.setdefault(placement.node, {})[uid] = placement

    def __delitem__(self, uid: str) -> None:
        placement = self._all.pop(uid)
        on_node = self._by_node[placement.node]
        del on_node[uid]
        if not on_node:
            del self._by_node[placement.node]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def on_node(self, node: str) -> Mapping[str, Placement]:
        """The placements on one node, by pod UID (read-only: change them through this mapping)."""
        return self._by_node.get(node, {})


@dataclass
class Fit:
    """The outcome of fitting a request on a node."""

    gpu: GpuState | None
    reason: str = ""
    unresolvable: bool = False
    score: int = 0


@dataclass
class PendingPod:
    namespace: str
    name: str
    units: int
    cores: int = 0
    annotations: dict[str, str] = field(default_factory=dict)


MAX_UNITS = 10**12


def container_units(container: Mapping[str, Any], resource: str) -> int:
    """Units of `resource` one container asks for (its limit, else its request)."""
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ValueError(f"container {container.get('name')!r}: resources must be an object")
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if not isinstance(values, Mapping):
            raise ValueError(f"container {container.get('name')!r}: resources.{part} must be an object")
        if resource in values:
            return whole_number(values[resource], f"container {container.get('name')!r} {resource}", MAX_UNITS)
    return 0


def pod_units(pod: Mapping[str, Any], resource: str) -> int:
    """Units a pod needs on one GPU: app containers add up; init containers run one at a time."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError("Pod.spec must be an object")
    containers = spec.get("containers") or []
    inits = spec.get("initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        raise ValueError("Pod.spec.containers and initContainers must be lists")
    for field_name, items in (("containers", containers), ("initContainers", inits)):
        for index, container in enumerate(items):
            if not isinstance(container, Mapping):
                raise ValueError(f"Pod.spec.{field_name}[{index}] must be a container object, got {container!r:.40}")
    app = sum(container_units(c, resource) for c in containers)
    init = max((container_units(c, resource) for c in inits), default=0)
    return max(app, init)


@dataclass(frozen=True)
class Request:
    """What a pod asks of one GPU: memory units and a compute share in percent (0: none)."""

    units: int
    cores: int = 0


def pod_request(pod: Mapping[str, Any], prefix: str) -> Request:
    """A pod's memory units and compute share; ValueError when a container asks for one without
    the other (a share is of the GPU its memory is on, and a GPU container on a node with shares
    needs one)."""
    memory, cores = names.resource(prefix, "memory"), names.resource(prefix, "cores")
    units = pod_units(pod, memory)
    share = pod_units(pod, cores)
    if share:
        spec = pod.get("spec") or {}
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            mine = container_units(container, cores)
            if bool(container_units(container, memory)) != bool(mine):
                raise ValueError(
                    f"container {container.get('name')!r}: ask for {memory} and {cores} together "
                    "(a compute share is of the GPU the container's memory is on)"
                )
            if mine > contract.MAX_SHARE:
                raise ValueError(
                    f"container {container.get('name')!r}: {cores} is a percentage of one GPU "
                    f"(1-{contract.MAX_SHARE}), got {mine}"
                )
    return Request(units, share)


class PodRecord(NamedTuple):
    """What the model reads of a pod (pod_record): the extender's own watch makes it from each
    event, the poster's watch sends it over a socket (extender_pods.py), only when it changed."""

    uid: str
    namespace: str
    name: str
    node: str  # "" while pending
    gpu_uuid: str  # the GPU our Binding recorded; "" when none
    units: int
    cores: int
    ended: bool  # Succeeded or Failed: holds nothing


def pod_record(pod: Mapping[str, Any], prefix: str) -> PodRecord:
    """A pod as the model counts it; a pod whose request is malformed asks for nothing."""
    meta = pod.get("metadata") or {}
    try:
        request = pod_request(pod, prefix)
    except ValueError:
        request = Request(0)
    return PodRecord(
        str(meta.get("uid", "")),
        str(meta.get("namespace", "")),
        str(meta.get("name", "")),
        str((pod.get("spec") or {}).get("nodeName") or ""),
        str((meta.get("annotations") or {}).get(names.annotation(prefix, "gpu_uuid")) or ""),
        request.units,
        request.cores,
        (pod.get("status") or {}).get("phase", "") in TERMINAL_PHASES,
    )


def parse_annotation(text: str) -> tuple[int, list[GpuState]]:
    """The device plugin's node annotation -> (unit_mib, GPUs), read by the one reader the collection's
    cluster view uses too (gpus_annotation.py); ValueError when malformed."""
    unit, gpus = gpus_annotation.read(text)
    return unit, [
        GpuState(
            uuid=g["uuid"],
            index=g["index"],
            units=g["units"],
            published_used=g["used_units"],
            healthy=g["healthy"],
            cores=g["cores"],
            published_cores=g["used_cores"],
        )
        for g in gpus
    ]


class ClusterModel:
    """Nodes' GPUs, pods placed on them and the extender's own bind reservations."""

    def __init__(self, resource_prefix: str = "vgpu.io", reservation_ttl_s: float = 300.0) -> None:
        self.prefix = resource_prefix
        self.resource = names.resource(resource_prefix, "memory")
        self.cores_resource = names.resource(resource_prefix, "cores")
        self.annotation_key = names.annotation(resource_prefix, "gpus")
        self.uuid_key = names.annotation(resource_prefix, "gpu_uuid")
        self.index_key = names.annotation(resource_prefix, "gpu_index")
        self.assume_key = names.annotation(resource_prefix, "assume_time")
        self.reservation_ttl_s = reservation_ttl_s
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeState] = {}
        self.node_errors: dict[str, str] = {}
        self.placements = Placements()
        self._bulk = False  # during replace_all: count once at the end, not per object
        self.pending: dict[str, PendingPod] = {}
        # filter's fast path: the nodes where a request size fits, told of every node that changes.
        self.fits = FitIndexes(lambda: self.nodes)

    # --- nodes ---------------------------------------------------------------------------------
    def set_node(self, node: Mapping[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        text = (meta.get("annotations") or {}).get(self.annotation_key)
        with self.lock:
            if text is None:
                self.nodes.pop(name, None)
                self.node_errors.pop(name, None)
                self.fits.changed(name)
                return
            known = self.nodes.get(name)
            if known is not None and known.source == text:
                return  # a status heartbeat: nothing the model counts changed
            try:
                unit, gpus = parse_annotation(text)
            except (ValueError, KeyError, TypeError) as exc:
                self.nodes.pop(name, None)
                self.node_errors[name] = f"unreadable {self.annotation_key} annotation: {exc}"
                self.fits.changed(name)
                return
            self.node_errors.pop(name, None)
            state = NodeState(name=name, unit_mib=unit, gpus=gpus, source=text)
            self.nodes[name] = state
            self._recount(name)

    def remove_node(self, name: str) -> None:
        with self.lock:
            self.nodes.pop(name, None)
            self.node_errors.pop(name, None)
            self.fits.changed(name)

    def _recount(self, name: str) -> None:
        state = self.nodes.get(name)
        if state is None or self._bulk:
            return
        for gpu in state.gpus:
            gpu.placed = gpu.placed_cores = 0
        for placement in self.placements.on_node(name).values():
            target = state.gpu(placement.gpu_uuid)
            if target is not None:
                target.placed += placement.units
                target.placed_cores += placement.cores
        state.refresh()
        self.fits.changed(name)

    # --- pods ----------------------------------------------------------------------------------
    def set_pod(self, pod: Mapping[str, Any]) -> None:
        """Follow a pod from the watch: placed pods count on their GPU until they end."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        # A terminating pod still holds its memory until it is gone (DELETED event) or has ended.
        ended = (pod.get("status") or {}).get("phase", "") in TERMINAL_PHASES
        if not ended and self._unchanged(uid, pod, meta):
            return  # most watch events: a status update changes nothing the model counts
        self.set_record(pod_record(pod, self.prefix))

    def set_record(self, pod: PodRecord) -> None:
        """Follow a pod as its record says (set_pod's, or the poster's watch's)."""
        uid, node, gpu_uuid = pod.uid, pod.node, pod.gpu_uuid
        with self.lock:
            if pod.units == 0 or pod.ended:
                self.remove_pod(uid)
                return
            if not node:
                self.pending[uid] = PendingPod(pod.namespace, pod.name, pod.units, pod.cores)
                return
            self.pending.pop(uid, None)
            if not gpu_uuid:
                return  # not placed by us: the node annotation counts it
            old = self.placements.get(uid)
            self.placements[uid] = Placement(uid, pod.namespace, pod.name, node, gpu_uuid, pod.units, pod.cores)
            if old is not None and (old.node, old.gpu_uuid, old.units, old.cores) == (
                node,
                gpu_uuid,
                pod.units,
                pod.cores,
            ):
                return  # a status change, or our reservation now seen bound: same count
            if old is not None and old.node != node:
                self._recount(old.node)
            self._recount(node)

    def _unchanged(self, uid: str, pod: Mapping[str, Any], meta: Mapping[str, Any]) -> bool:
        """A running pod's event that changes nothing counted: still pending, or still on the GPU it
        was seen bound to. Its units need no reading: the API server refuses changes to a pod's
        extended resources (an in-place resize is of CPU and memory only)."""
        node = (pod.get("spec") or {}).get("nodeName")
        with self.lock:
            if not node:
                return uid in self.pending
            old = self.placements.get(uid)
            return (
                old is not None
                and old.reserved_at is None
                and old.node == node
                and old.gpu_uuid == (meta.get("annotations") or {}).get(self.uuid_key)
            )

    def remove_pod(self, uid: str) -> None:
        with self.lock:
            self.pending.pop(uid, None)
            old = self.placements.pop(uid, None)
            if old is not None:
                self._recount(old.node)

    def replace_all(self, nodes: Iterable[Mapping[str, Any]] | None, pods: Iterable[Mapping[str, Any]] | None) -> None:
        """Rebuild from full lists (start-up and relists); our unexpired reservations survive."""
        records = None if pods is None else (pod_record(pod, self.prefix) for pod in pods)
        self._replace(nodes, records)

    def replace_records(self, pods: Iterable[PodRecord]) -> None:
        """replace_all's pods, from the poster's watch: its full list as records."""
        self._replace(None, pods)

    def _replace(self, nodes: Iterable[Mapping[str, Any]] | None, pods: Iterable[PodRecord] | None) -> None:
        with self.lock:
            self._bulk = True
            try:
                if nodes is not None:
                    self.nodes.clear()
                    self.node_errors.clear()
                    for node in nodes:
                        self.set_node(node)
                if pods is not None:
                    self.placements = Placements(
                        (uid, p) for uid, p in self.placements.items() if p.reserved_at is not None
                    )
                    self.pending.clear()
                    for pod in pods:
                        self.set_record(pod)
            finally:
                self._bulk = False
            self._recount_all()

    def unlisted(self, node: str, pods: Iterable[Mapping[str, Any]], read_at: float) -> list[Placement]:
        """The placements on the node that a read of its pods started at `read_at` should have
        listed and did not: gone, or the read was behind (the caller asks the API about each)."""
        listed = {str((pod.get("metadata") or {}).get("uid", "")) for pod in pods}
        with self.lock:
            return [
                p
                for uid, p in self.placements.on_node(node).items()
                if uid not in listed and self.listed_if_present(p, read_at)
            ]

    def replace_node_pods(
        self, node: str, pods: Iterable[Mapping[str, Any]], *, read_at: float, keep: Iterable[str] = ()
    ) -> bool:
        """Set the pods placed on one node from a fresh read of them, started at `read_at` (monotonic;
        the extender checks a refusal this way). True when what the node's GPUs hold changed.

        A reservation survives unless its bind had finished before the read started (the API then
        lists the pod unless it was deleted); the placements in `keep` (pods the API still has,
        that the read missed) survive too. The watch may still deliver events older than the
        read: those only add back a pod that has gone, until its deletion follows, so the model
        errs towards full, never towards free."""
        kept = set(keep)
        with self.lock:
            before = dict(self.placements.on_node(node))
            listed = {str((pod.get("metadata") or {}).get("uid", "")): pod for pod in pods}
            for uid, placement in before.items():
                if uid not in listed and uid not in kept and self.listed_if_present(placement, read_at):
                    del self.placements[uid]
            moved_from = set()  # nodes the model had a listed pod on (a reservation elsewhere)
            self._bulk = True
            try:
                for uid, pod in listed.items():
                    if (pod.get("spec") or {}).get("nodeName") == node:
                        held = self.placements.get(uid)
                        if held is not None and held.node != node:
                            moved_from.add(held.node)
                        self.set_pod(pod)
            finally:
                self._bulk = False
            for name in (node, *moved_from):
                self._recount(name)
            after = self.placements.on_node(node)
            return {uid: (p.gpu_uuid, p.units, p.cores) for uid, p in before.items()} != {
                uid: (p.gpu_uuid, p.units, p.cores) for uid, p in after.items()
            }

    def _recount_all(self) -> None:
        """One pass over all placements (start-up and relists), instead of one per node."""
        for state in self.nodes.values():
            for gpu in state.gpus:
                gpu.placed = gpu.placed_cores = 0
        for placement in self.placements.values():
            holder = self.nodes.get(placement.node)
            target = holder.gpu(placement.gpu_uuid) if holder else None
            if target is not None:
                target.placed += placement.units
                target.placed_cores += placement.cores
        for state in self.nodes.values():
            state.refresh()
        self.fits.clear()

    def expire_reservations(self, now: float | None = None) -> int:
        """Drop reservations of binds that never showed up as bound pods; returns how many."""
        now = time.monotonic() if now is None else now
        with self.lock:
            stale = [
                uid
                for uid, p in self.placements.items()
                if p.reserved_at is not None and now - p.reserved_at > self.reservation_ttl_s
            ]
            for uid in stale:
                self.remove_pod(uid)
            return len(stale)

    # --- decisions -----------------------------------------------------------------------------
    def fit(self, node_name: str, units: int, cores: int = 0) -> Fit:
        """Can one GPU of this node take `units` and a compute share of `cores` percent? With the
        placed GPU and a bin-packing score."""
        state = self.nodes.get(node_name)
        if state is None:
            why = self.node_errors.get(node_name) or (
                f"node has no {self.annotation_key} annotation (is the device plugin running there?)"
            )
            return Fit(None, why, unresolvable=False)
        mismatch = self.share_mismatch(state, units, cores)
        if mismatch is not None:
            return mismatch
        if state.max_free < units:
            unit = state.unit_mib
            largest = f"largest free {state.max_free * unit} MiB"
            if state.max_units < units:
                healthy = "healthy GPU" if any(not g.healthy for g in state.gpus) else "GPU"
                return Fit(None, f"no {healthy} has {units * unit} MiB in total; {largest}", unresolvable=True)
            return Fit(None, f"no single GPU with {units * unit} MiB free; {largest}")
        gpu = state.ranking.pick(units)
        assert gpu is not None  # max_free >= units guarantees one
        if cores > gpu.cores_free:
            return self._no_share(state, gpu, units, cores)
        return Fit(gpu, score=state.score(units))

    def share_mismatch(self, state: NodeState, units: int, cores: int) -> Fit | None:
        """A pod with a share on a node without shares, or a GPU pod without one on a node with."""
        if cores and not state.shares:
            return Fit(
                None,
                f"node has no compute shares ({self.cores_resource} needs MPS and compute shares on the node)",
                unresolvable=True,
            )
        if units and not cores and state.shares:
            return Fit(
                None,
                f"node shares its GPUs' compute: ask for {self.cores_resource} (percent of one GPU) "
                f"with {self.resource}",
                unresolvable=True,
            )
        return None

    @staticmethod
    def _no_share(state: NodeState, gpu: GpuState, units: int, cores: int) -> Fit:
        """Why `cores` % does not fit where the memory goes: the placed GPU has the most compute free
        of those where the memory fits (placement.py), so it fits on none of them."""
        most = max((g.cores for g in state.gpus if g.healthy), default=0)
        if cores > most:
            return Fit(None, f"a compute share of {cores} % is more than one GPU's {most} %", unresolvable=True)
        return Fit(
            None,
            f"no GPU with {units * state.unit_mib} MiB free has {cores} % compute free (the most is "
            f"{gpu.cores_free} %)",
        )

    def admitted(self, names: list[str], units: int, cores: int = 0) -> list[str]:
        """filter's fast path, in the order given: the nodes where a GPU has `units` free (nodes
        without compute shares, pods without a share); fit() judges the rest one by one. A lookup
        per name in the size's index (fit_index.py): kube-scheduler sends up to thousands per pod."""
        if not units:
            return list(names)
        if cores:
            return []
        with self.lock:
            return self.fits.admitted(names, units)

    def tightest(self, names: list[str], units: int, cores: int = 0) -> list[str]:
        """Of nodes where `units` (and `cores`) fit, those where they pack tightest (the highest
        score), in the order given; ties all stay (kube-scheduler's own scores choose among them)."""
        with self.lock:
            if not cores:  # every node that fit() admits is one admitted() admits: indexed
                return self.fits.tightest(names, units)
            scores = [self.nodes[name].score(units) for name in names]
        best = max(scores, default=0)
        return [name for name, score in zip(names, scores) if score == best]

    def reserve(
        self, uid: str, namespace: str, name: str, *, node: str, gpu: GpuState, units: int, cores: int = 0
    ) -> Placement:
        """Count a pod on a GPU from its bind until the watch shows it bound (or the TTL ends)."""
        with self.lock:
            self.pending.pop(uid, None)
            placement = Placement(uid, namespace, name, node, gpu.uuid, units, cores, reserved_at=time.monotonic())
            old = self.placements.get(uid)
            self.placements[uid] = placement
            if old is not None and old.node != node:
                self._recount(old.node)  # the bind verb refuses placed pods; the model stays exact anyway
            self._recount(node)
            return placement

    def bound(self, placement: Placement) -> None:
        """Our bind of a reserved pod succeeded: from now on a read of the API lists the pod."""
        with self.lock:
            if placement.reserved_at is not None:
                placement.bound_at = time.monotonic()

    @staticmethod
    def listed_if_present(placement: Placement, read_at: float) -> bool:
        """Would a read of the API started at `read_at` list this placement's pod, were it there?
        Yes for pods seen bound and for our binds that finished before the read."""
        if placement.reserved_at is None:
            return True
        return placement.bound_at is not None and placement.bound_at < read_at

    def release(self, placement: Placement) -> None:
        """Undo reserve() after a failed bind, unless the pod's placement has changed since (the
        watch saw it bound after all): only our own reservation is ever dropped."""
        with self.lock:
            if self.placements.get(placement.uid) is placement:
                self.remove_pod(placement.uid)
