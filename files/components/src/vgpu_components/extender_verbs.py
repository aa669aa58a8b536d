"""gpushare-scheduler-extender's verbs: kube-scheduler's HTTP extender for per-GPU memory fit.

Verbs (POST, JSON exactly as kube-scheduler sends it, nodeCacheCapable):
  filter           ExtenderArgs -> ExtenderFilterResult: a node passes only where one GPU fits
  filter-tightest  the same, then only the passing nodes where the pod packs tightest (highest
                   packing score): bin-packing without a prioritize call ("tightest" packing)
  prioritize       ExtenderArgs -> HostPriorityList: the packing score 0..10 of each node, which
                   kube-scheduler weighs with its own scores ("weighted" packing, after filter)
  bind             ExtenderBindingArgs -> ExtenderBindingResult: record the GPU, then bind
  preempt          ExtenderPreemptionArgs -> ExtenderPreemptionResult: per node kube-scheduler would
                   preempt on, the victims that free one GPU (preemption.py); nodes where none do
                   are left out, so kube-scheduler never evicts pods whose memory the pod cannot use
The model of the cluster is scheduling.py's; the HTTP layer is extender_http.py; the API
adapters and the informer that keeps the model in step are in kube.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import prometheus_client
from kubernetes.client.rest import ApiException

from vgpu_components import kube, preemption
from vgpu_components.extender_http import Awaiting, BadRequest, Later
from vgpu_components.extender_pods import PodFeed, freeze
from vgpu_components.extender_poster import Poster, log_bound
from vgpu_components.scheduling import ClusterModel, Placement, Request, pod_request

log = logging.getLogger("vgpu.extender")

DECISIONS = prometheus_client.Counter(
    "vgpu_extender_filter_nodes_total",
    "Nodes judged by filter, by outcome (looser: fits, but filter-tightest kept tighter nodes)",
    ["outcome"],
)
RECHECKS = prometheus_client.Counter(
    "vgpu_extender_rechecked_nodes_total",
    "Nodes read again from the API before a refusal, by outcome (stale: the watch had not yet shown "
    "a pod that had gone)",
    ["outcome"],
)
# Nodes read again for one refused pod at most: the ones closest to fitting it.
RECHECK_NODES = 16
# Pods whose last preemption event preempt remembers (to post it once per reason).
TOLD_PODS = 4096
BINDS = prometheus_client.Counter("vgpu_extender_binds_total", "Bind requests, by outcome", ["outcome"])
POSTED = prometheus_client.Counter(
    "vgpu_extender_bindings_posted_total",
    "Bindings sent to the API server, by the process that sent them (poster: the poster process; extender: "
    "the extender's own, while no poster runs)",
    ["by"],
)
PREEMPTIONS = prometheus_client.Counter(
    "vgpu_extender_preemption_nodes_total",
    "Nodes judged by preempt, by outcome (victims: a GPU frees with them; none: no GPU can be freed)",
    ["outcome"],
)


@dataclass
class Verdict:
    """filter's judgement: passing nodes (after filter-tightest's cut: `fitting` passed before it)
    and the refused ones with their reasons."""

    passed: list[str] = field(default_factory=list)
    fitting: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


def _all_strings(items: list[Any]) -> bool:
    """Whether every item is a str, checked in C (join refuses anything else): kube-scheduler sends
    up to thousands of node names per pod, and a check per name in Python cost a tenth of filter."""
    try:
        "".join(items)
    except TypeError:
        return False
    return True


class Extender:
    """The verbs over the model; JSON in, JSON-ready objects out.

    A request leaves nothing behind but a bind's reservation (and preempt's last event message per
    pod): the extender keeps no state per caller or per filtered pod, and it writes to the API only
    the Binding of a GPU pod it places and a pod's event when preemption frees no GPU; its reads
    are the informers' list and watch, a refused node's pods, a pod to bind and, to preempt, the
    candidate nodes' pods and the PodDisruptionBudgets."""

    def __init__(self, model: ClusterModel, api: kube.ClusterApi | None = None, poster: Poster | None = None) -> None:
        self.model = model
        self.api = api
        # With a poster (extender_poster.py) bind awaits its Binding on the loop; without, bind
        # waits on the API server on a worker thread, as preempt does.
        self.poster = poster
        self.blocking = frozenset({"preempt"} if poster is not None else {"bind", "preempt"})
        self.informers: dict[str, kube.Informer] = {}
        # The pods come from the poster's watch while it runs, else from the extender's own.
        self.pods: PodFeed | None = None
        if api is not None:
            self.informers = {"nodes": kube.Informer(api, "nodes", self._list_nodes, self._node_event)}
            self.pods = PodFeed(model, api)
        # prioritize's encoded HostPriority per (node, score).
        self._priority_entries: dict[tuple[str, int], str] = {}
        # preempt's last event message per pod uid, so that a retried pod is told once per reason.
        self._told: dict[str, str] = {}

    @property
    def verbs(self) -> Mapping[str, Callable[[Any], Any]]:
        return {
            "filter": self.filter,
            "filter-tightest": lambda body: self.filter(body, tightest=True),
            "prioritize": self.prioritize,
            "bind": self.bind,
            "preempt": self.preempt,
        }

    # --- request parsing -----------------------------------------------------------------------
    def _args(self, body: Any) -> tuple[Mapping[str, Any], list[str], list[Any] | None]:
        if not isinstance(body, Mapping):
            raise BadRequest("expected an ExtenderArgs object with Pod and NodeNames (or Nodes)")
        pod = body.get("Pod")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise BadRequest("ExtenderArgs.Pod must be a Pod object with a spec")
        names = body.get("NodeNames")
        nodes = body.get("Nodes")
        items: list[Any] | None = None
        if names is None and isinstance(nodes, Mapping):
            items = nodes.get("items") or []
            if not isinstance(items, list):
                raise BadRequest("ExtenderArgs.Nodes.items must be a list of Node objects")
            names = []
            for index, node in enumerate(items):
                meta = node.get("metadata") if isinstance(node, Mapping) else None
                if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
                    raise BadRequest(f"ExtenderArgs.Nodes.items[{index}] must be a Node object with a name")
                names.append(meta["name"])
        if names is None:
            names = []
        if not isinstance(names, list) or not _all_strings(names):
            raise BadRequest(f"ExtenderArgs.NodeNames must be a list of node names, got {names!r:.200}")
        return pod, names, items

    def _request(self, pod: Mapping[str, Any]) -> Request:
        try:
            return pod_request(pod, self.model.prefix)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    # --- verbs -----------------------------------------------------------------------------------
    def filter(self, body: Any, tightest: bool = False) -> dict[str, Any] | Later:
        """The nodes where one GPU fits the pod; with `tightest`, only those of them where it packs
        tightest (the highest packing score), so that kube-scheduler needs no prioritize call.

        A node refused for memory that pods hold is read again from the API first (_recheck)."""
        pod, names, items = self._args(body)
        request = self._request(pod)
        verdict = self._judge(request, names, tightest)
        stale = self._maybe_stale(verdict.failed)
        if stale:
            return Later(lambda: self._answer(self._recheck(request, names, tightest, verdict, stale), items))
        return self._answer(verdict, items)

    def _judge(self, request: Request, names: list[str], tightest: bool) -> Verdict:
        units, cores = request.units, request.cores
        verdict = Verdict()
        with self.model.lock:
            verdict.passed = self.model.admitted(names, units, cores)
            if len(verdict.passed) < len(names):  # the rest one by one, in the order kube-scheduler gave
                quick, verdict.passed = set(verdict.passed), []
                for name in names:
                    fit = None if name in quick else self.model.fit(name, units, cores)
                    if fit is None or fit.gpu is not None:
                        verdict.passed.append(name)
                    elif fit.unresolvable:
                        verdict.unresolvable[name] = fit.reason
                    else:
                        verdict.failed[name] = fit.reason
            verdict.fitting = len(verdict.passed)
            if tightest and units and verdict.fitting > 1:
                verdict.passed = self.model.tightest(verdict.passed, units, cores)
        return verdict

    def _maybe_stale(self, failed: Mapping[str, str]) -> list[str]:
        """The refused nodes where pods we placed hold memory, the most free first: kube-scheduler
        retries a turned-away pod the moment it sees such a pod go, maybe before our watch shows
        it, and then waits for the next cluster event (up to 5 minutes on a quiet cluster)."""
        if self.api is None or not failed:
            return []
        model = self.model
        with model.lock:
            now = time.monotonic()
            holders = [
                node
                for node in failed
                if any(model.listed_if_present(p, now) for p in model.placements.on_node(node).values())
            ]
            ranked = sorted(holders, key=lambda name: -model.nodes[name].max_free if name in model.nodes else 0)
        return ranked[:RECHECK_NODES]

    def _recheck(
        self, request: Request, names: list[str], tightest: bool, verdict: Verdict, nodes: list[str]
    ) -> Verdict | str:
        """Read the pods of `nodes` from the API (a read as recent as kube-scheduler's view) and
        judge again if that changed what their GPUs hold. When the API does not answer, an error
        text: kube-scheduler parks a pod turned away until the next cluster event (up to 5 minutes),
        but retries a pod an extender failed on after its backoff (1-10 s)."""
        assert self.api is not None
        changed = False
        for node in nodes:
            try:
                stale = self._read_node(node)[1]
            except Exception as exc:
                RECHECKS.labels("error").inc()
                log.warning("could not read the pods on %s again before refusing a pod: %s", node, exc)
                return (
                    f"could not read the pods on {node} from the API server to confirm that no GPU there has "
                    f"the memory asked ({exc}); kube-scheduler retries the pod after its backoff"
                )
            RECHECKS.labels("stale" if stale else "current").inc()
            if stale:
                log.info("the watch was behind on %s: judged again from the pods the API lists", node)
            changed = changed or stale
        return self._judge(request, names, tightest) if changed else verdict

    def _read_node(self, node: str) -> tuple[list[dict[str, Any]], bool]:
        """The node's pods as the API lists them now, set in the model; and whether that changed
        what the model had its GPUs hold (the watch was behind)."""
        assert self.api is not None
        read_at = time.monotonic()
        pods = self.api.pods_on_node(node)
        return pods, self.model.replace_node_pods(
            node, pods, read_at=read_at, keep=self._still_there(node, pods, read_at)
        )

    def _still_there(self, node: str, pods: list[dict[str, Any]], read_at: float) -> set[str]:
        """The pods the model places on the node that the read did not list and the API still has,
        asked one by one: only a pod the API says is gone frees its GPU. In tests/k8s a list of a
        node's pods missed a pod whose bind had returned, and the next pod went onto its memory."""
        assert self.api is not None
        kept = set()
        for placement in self.model.unlisted(node, pods, read_at):
            try:
                pod = self.api.get_pod(placement.namespace, placement.name)
            except Exception as exc:
                if not (isinstance(exc, ApiException) and exc.status == 404):  # 404: gone
                    kept.add(placement.uid)  # unknown: keep it (the model errs towards full)
                continue
            meta = pod.get("metadata") or {}
            if meta.get("uid") == placement.uid:  # terminating too: it holds its memory until gone
                kept.add(placement.uid)
        if kept:
            log.warning("a read of the pods on %s missed %d pod(s) the API still has: kept", node, len(kept))
        return kept

    @staticmethod
    def _answer(verdict: Verdict | str, items: list[Any] | None) -> dict[str, Any]:
        if isinstance(verdict, str):  # kube-scheduler retries the pod after its backoff
            return {
                "NodeNames": [],
                "Nodes": None,
                "FailedNodes": {},
                "FailedAndUnresolvableNodes": {},
                "Error": verdict,
            }
        DECISIONS.labels("passed").inc(len(verdict.passed))
        DECISIONS.labels("looser").inc(verdict.fitting - len(verdict.passed))
        DECISIONS.labels("failed").inc(len(verdict.failed) + len(verdict.unresolvable))
        result: dict[str, Any] = {
            "NodeNames": verdict.passed,
            "Nodes": None,
            "FailedNodes": verdict.failed,
            "FailedAndUnresolvableNodes": verdict.unresolvable,
            "Error": "",
        }
        if items is not None:
            keep = set(verdict.passed)
            result["Nodes"] = {"items": [n for n in items if n["metadata"]["name"] in keep]}
        return result

    def prioritize(self, body: Any) -> bytes:
        """The HostPriorityList, encoded: kube-scheduler waits on this for every pod, and building
        and encoding hundreds of small objects was most of the verb's time."""
        pod, names, _items = self._args(body)
        units = self._request(pod).units
        nodes = self.model.nodes
        with self.model.lock:
            scores = [
                (name, state.score(units) if units and (state := nodes.get(name)) is not None else 0) for name in names
            ]
        entries = self._priority_entries
        if len(entries) > 16 * (len(nodes) + 64):
            entries.clear()  # nodes came and went; keep the cache bounded
        parts = []
        for key in scores:
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = json.dumps({"Host": key[0], "Score": key[1]}, separators=(",", ":"))
            parts.append(entry)
        return ("[" + ",".join(parts) + "]").encode()

    def bind(self, body: Any) -> dict[str, Any] | Later | Awaiting:
        namespace, name, uid, node = _binding_args(body)
        if self.poster is None:
            return self._answer_bind(namespace, name, uid, node)
        if not self.poster.attached:  # no poster running: the bind waits on a worker thread
            return Later(lambda: self._answer_bind(namespace, name, uid, node))
        if uid not in self.model.pending:
            # The watch has not shown the pod yet: its units are read from the API server on a
            # worker thread, and the poster posts its Binding from there.
            loop = asyncio.get_running_loop()
            return Later(lambda: self._reserve_then_post(namespace, name, uid, node, loop))
        reserved = self.reserve_for_bind(namespace, name, uid, node)  # no API call: the pod is pending
        if isinstance(reserved, str):
            BINDS.labels("error").inc()
            return {"Error": reserved}
        return Awaiting(self._post(reserved, node))

    def _reserve_then_post(
        self, namespace: str, name: str, uid: str, node: str, loop: asyncio.AbstractEventLoop
    ) -> dict[str, Any]:
        """On a worker thread: reserve (reading the pod from the API), then the poster's Binding,
        awaited on the server's loop."""
        try:
            reserved = self.reserve_for_bind(namespace, name, uid, node)
        except Exception as exc:
            log.exception("bind of %s/%s to %s failed", namespace, name, node)
            reserved = f"binding {namespace}/{name} to {node} failed: {exc}"
        if isinstance(reserved, str):
            BINDS.labels("error").inc()
            return {"Error": reserved}
        return asyncio.run_coroutine_threadsafe(self._post(reserved, node), loop).result()

    def _answer_bind(self, namespace: str, name: str, uid: str, node: str) -> dict[str, Any]:
        try:
            error = self._bind(namespace, name, uid, node)
        except Exception as exc:
            log.exception("bind of %s/%s to %s failed", namespace, name, node)
            error = f"binding {namespace}/{name} to {node} failed: {exc}"
        BINDS.labels("error" if error else "bound").inc()
        return {"Error": error}

    async def _post(self, reserved: Reserved, node: str) -> dict[str, Any]:
        """The reserved pod's Binding, posted by the poster process; the reservation released when
        it failed."""
        assert self.poster is not None
        p = reserved.placement
        POSTED.labels("poster").inc()
        try:
            annotations, placed = reserved.annotations, reserved.placed
            error = await self.poster.post(p.namespace, p.name, p.uid, node, annotations, placed=placed)
        except ConnectionError as exc:
            error = str(exc)
        if error:
            error = f"binding {p.namespace}/{p.name} to {node} failed: {error}"
        self.finish_bind(reserved, error)
        BINDS.labels("error" if error else "bound").inc()  # the poster logged a bound pod
        return {"Error": error}

    def _units_to_bind(self, namespace: str, name: str, uid: str, node: str) -> tuple[str, Request]:
        """(refusal, request) for a bind: what the pod asks of a GPU, or why it must not be bound."""
        assert self.api is not None
        what = f"{namespace}/{name}"
        pending = self.model.pending.get(uid)
        if pending is not None:
            if (pending.namespace, pending.name) != (namespace, name):
                return f"refusing to bind {what}: pod uid {uid} is {pending.namespace}/{pending.name}", Request(0)
            request = Request(pending.units, pending.cores)
        else:
            pod = self.api.get_pod(namespace, name)
            bound_to = (pod.get("spec") or {}).get("nodeName")
            if bound_to:
                return f"refusing to bind {what} to {node}: it is already bound to {bound_to}", Request(0)
            request = pod_request(pod, self.model.prefix)
        if not request.units:
            resource = self.model.resource
            return f"refusing to bind {what}: it requests no {resource}; the extender binds only GPU pods", request
        return "", request

    def reserve_for_bind(self, namespace: str, name: str, uid: str, node: str) -> Reserved | str:
        """Choose the pod's GPU on the node and reserve it; an error text instead when it must not
        be bound. A pod the extender already placed, or that the API shows bound, is refused before
        anything changes: its placement stays as it is."""
        if self.api is None:
            return "the extender has no Kubernetes API connection"
        model = self.model
        what = f"{namespace}/{name}"
        refusal, request = self._units_to_bind(namespace, name, uid, node)
        if refusal:
            return refusal
        units, cores = request.units, request.cores
        # The GPU is chosen and reserved under the model's lock, so concurrent binds never pick the
        # same free units; the API call then runs outside it, in parallel with other binds.
        with model.lock:
            placed = model.placements.get(uid)
            if placed is not None:
                return f"refusing to bind {what} to {node}: it is already placed on {placed.node} GPU {placed.gpu_uuid}"
            fit = model.fit(node, units, cores)
            if fit.gpu is None:
                return f"cannot bind {what} to {node}: {fit.reason}"
            gpu = fit.gpu
            reservation = model.reserve(uid, namespace, name, node=node, gpu=gpu, units=units, cores=cores)
        # The API server copies the Binding's annotations onto the pod as it binds it: the GPU is
        # recorded without any pod PATCH.
        annotations = {
            model.uuid_key: gpu.uuid,
            model.index_key: str(gpu.index),
            model.assume_key: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        return Reserved(reservation, annotations, gpu.index)

    def finish_bind(self, reserved: Reserved, error: str) -> None:
        """The Binding's outcome: the pod counted as bound from now on, or its reservation released."""
        if error:
            self.model.release(reserved.placement)
        else:
            self.model.bound(reserved.placement)

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Place the pod on the node's GPU and bind it from this process; an error text instead
        when it must not be."""
        reserved = self.reserve_for_bind(namespace, name, uid, node)
        if isinstance(reserved, str):
            return reserved
        assert self.api is not None
        POSTED.labels("extender").inc()
        try:
            self.api.bind(namespace, name, uid, node, reserved.annotations)
        except Exception:
            self.finish_bind(reserved, "failed")
            raise
        self.finish_bind(reserved, "")
        log_bound(namespace, name, node, reserved.placed)
        return ""

    def preempt(self, body: Any) -> dict[str, Any]:
        """ExtenderPreemptionArgs {Pod, NodeNameToMetaVictims (nodeCacheCapable) or NodeNameToVictims}
        -> ExtenderPreemptionResult {NodeNameToMetaVictims}: for each node kube-scheduler chose
        victims on, the extender's own victims (preemption.py), read from the API: the node's pods
        as they are now and the PodDisruptionBudgets. A node where no GPU can be freed is left out;
        with no node left, kube-scheduler preempts nothing."""
        if not isinstance(body, Mapping):
            raise BadRequest("expected an ExtenderPreemptionArgs object with Pod and NodeNameToMetaVictims")
        pod = body.get("Pod")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise BadRequest("ExtenderPreemptionArgs.Pod must be a Pod object with a spec")
        candidates = body.get("NodeNameToMetaVictims") or body.get("NodeNameToVictims") or {}
        if not isinstance(candidates, Mapping) or not all(isinstance(n, str) for n in candidates):
            raise BadRequest(
                f"ExtenderPreemptionArgs.NodeNameToMetaVictims must map node names to victims, got {candidates!r:.200}"
            )
        request = self._request(pod)
        priority = pod_priority(pod)
        meta = pod.get("metadata") or {}
        what = f"{meta.get('namespace')}/{meta.get('name')}"
        answer: dict[str, Any] = {}
        if self.api is None or not request.units or not candidates:
            return {"NodeNameToMetaVictims": answer}
        budgets = self.api.disruption_budgets()
        refusals = []
        for node in sorted(candidates):
            pods = self._read_node(node)[0]
            chosen = self._victims(node, pods, budgets, request, priority)
            if isinstance(chosen, str):
                PREEMPTIONS.labels("none").inc()
                log.info("preemption for %s (priority %d): nothing to evict on %s: %s", what, priority, node, chosen)
                refusals.append(f"{node}: {chosen}")
                continue
            PREEMPTIONS.labels("victims").inc()
            uids = {str((v.get("metadata") or {}).get("uid")) for v in chosen}
            log.info(
                "preemption for %s (priority %d): on %s evicting %s",
                what,
                priority,
                node,
                ", ".join(sorted(f"{v['metadata'].get('namespace')}/{v['metadata'].get('name')}" for v in chosen)),
            )
            answer[node] = {
                "Pods": [{"UID": uid} for uid in sorted(uids)],
                "NumPDBViolations": preemption.violations(chosen, budgets),
            }
        if not answer:
            self._tell(
                pod, "no GPU can be freed for this pod by evicting pods of lower priority: " + "; ".join(refusals)
            )
        return {"NodeNameToMetaVictims": answer}

    def _tell(self, pod: Mapping[str, Any], message: str) -> None:
        """A Warning event on the pod with why preemption frees no GPU: kube-scheduler's own event
        says only that no node was left. Once per pod while the reason stands (kube-scheduler
        retries the pod many times); a failed post is logged, the answer stands."""
        assert self.api is not None
        uid = str((pod.get("metadata") or {}).get("uid", ""))
        if self._told.get(uid) == message:
            return
        if len(self._told) >= TOLD_PODS:
            self._told.clear()  # bounded: at worst a pod's event is posted again
        self._told[uid] = message
        try:
            self.api.pod_event(dict(pod), "PreemptionFreesNoGPU", message)
        except Exception as exc:
            log.warning("could not post the preemption event on the pod: %s", exc)

    def _victims(
        self,
        node: str,
        pods: list[dict[str, Any]],
        budgets: list[dict[str, Any]],
        request: Request,
        priority: int,
    ) -> list[dict[str, Any]] | str:
        """The pods to evict on `node` for the request, or why there are none."""
        model = self.model
        with model.lock:
            state = model.nodes.get(node)
            if state is None:
                return model.node_errors.get(node) or f"node has no {model.annotation_key} annotation"
            mismatch = model.share_mismatch(state, request.units, request.cores)
            if mismatch is not None:
                return mismatch.reason
            gpus = [
                preemption.Gpu(
                    g.index,
                    g.uuid,
                    g.units,
                    g.used,
                    g.healthy,
                    g.cores,
                    max(g.published_cores, g.placed_cores),
                )
                for g in state.gpus
            ]
            unit_mib = state.unit_mib
        by_uid: dict[str, dict[str, Any]] = {}
        residents = []
        for item in pods:
            resident = self._resident(node, item, budgets)
            if resident is not None:
                by_uid[resident.uid] = item
                residents.append(resident)
        found = preemption.choose(
            gpus, residents, priority=priority, units=request.units, cores=request.cores, unit_mib=unit_mib
        )
        if isinstance(found, preemption.Refusal):
            return found.reason
        if not found.pods:
            return "a GPU fits the pod already (its next attempt places it without evicting anything)"
        return [by_uid[p.uid] for p in found.pods]

    def _resident(self, node: str, pod: Mapping[str, Any], budgets: list[dict[str, Any]]) -> preemption.Resident | None:
        """A pod of the node as a possible victim: placed by us on a GPU, running or about to, not
        already terminating (its memory is on its way back)."""
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        gpu = (meta.get("annotations") or {}).get(self.model.uuid_key)
        phase = (pod.get("status") or {}).get("phase", "")
        if spec.get("nodeName") != node or not gpu or meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            return None
        try:
            request = pod_request(pod, self.model.prefix)
        except ValueError:
            return None
        if not request.units:
            return None
        return preemption.Resident(
            uid=str(meta.get("uid", "")),
            name=f"{meta.get('namespace')}/{meta.get('name')}",
            priority=pod_priority(pod),
            units=request.units,
            gpu=str(gpu),
            cores=request.cores,
            protected=preemption.protected(pod, budgets),
        )

    # --- API state -----------------------------------------------------------------------------
    def ready(self) -> tuple[bool, str]:
        synced = {kind: informer.synced for kind, informer in self.informers.items()}
        if self.pods is not None:
            synced["pods"] = self.pods.synced
        if synced and all(synced.values()):
            return True, f"synced: {len(self.model.nodes)} GPU nodes, {len(self.model.placements)} placed pods"
        return False, f"waiting for the API: {synced}"

    def _list_nodes(self, items: list[dict[str, Any]]) -> None:
        self.model.replace_all(items, None)
        freeze()

    def _node_event(self, event: str, obj: dict[str, Any]) -> None:
        if event == "DELETED":
            self.model.remove_node(str(obj.get("metadata", {}).get("name", "")))
        else:
            self.model.set_node(obj)


@dataclass(frozen=True)
class Reserved:
    """A bind's reservation: the placement counted in the model, and the annotations its Binding
    carries (the GPU's UUID and index, the assume time)."""

    placement: Placement
    annotations: dict[str, str]
    gpu_index: int

    @property
    def placed(self) -> dict[str, Any]:
        """What the bound line says of the placement (extender_poster.log_bound)."""
        p = self.placement
        return {"gpu_index": self.gpu_index, "gpu_uuid": p.gpu_uuid, "units": p.units, "cores": p.cores}


def _binding_args(body: Any) -> tuple[str, str, str, str]:
    """ExtenderBindingArgs -> (namespace, name, uid, node)."""
    if not isinstance(body, Mapping):
        raise BadRequest("expected an ExtenderBindingArgs object")
    fields = {}
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = body.get(key)
        if not isinstance(value, str) or not value:
            raise BadRequest(f"ExtenderBindingArgs.{key} must be a non-empty string, got {value!r}")
        fields[key] = value
    return fields["PodNamespace"], fields["PodName"], fields["PodUID"], fields["Node"]


def pod_priority(pod: Mapping[str, Any]) -> int:
    """spec.priority, which the API server sets from the pod's PriorityClass (0 when none)."""
    value = (pod.get("spec") or {}).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
