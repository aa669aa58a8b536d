"""gpushare-scheduler-extender: kube-scheduler's HTTP extender for per-GPU memory fit.

Verbs (POST, JSON exactly as kube-scheduler sends it, nodeCacheCapable):
  filter           ExtenderArgs -> ExtenderFilterResult: a node passes only where one GPU fits
  filter-tightest  the same, then only the passing nodes where the pod packs tightest (highest
                   packing score): bin-packing without a prioritize call ("tightest" packing)
  prioritize       ExtenderArgs -> HostPriorityList: the packing score 0..10 of each node, which
                   kube-scheduler weighs with its own scores ("weighted" packing, after filter)
  bind             ExtenderBindingArgs -> ExtenderBindingResult: record the GPU, then bind
GET /healthz (alive), /readyz (API state synced), /metrics (Prometheus).
The verb is the last path segment, so both /filter and /<prefix>/filter work.
"""

from __future__ import annotations

import gc
import json
import logging
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import prometheus_client
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from vgpu_components import __version__, config, kube
from vgpu_components.scheduling import ClusterModel, pod_units

log = logging.getLogger("vgpu.extender")
MAX_BODY = 64 * 1024 * 1024

REQUESTS = prometheus_client.Histogram(
    "vgpu_extender_request_seconds",
    "Time to answer one extender request",
    ["verb"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
)
DECISIONS = prometheus_client.Counter(
    "vgpu_extender_filter_nodes_total",
    "Nodes judged by filter, by outcome (looser: fits, but filter-tightest kept tighter nodes)",
    ["outcome"],
)
BINDS = prometheus_client.Counter("vgpu_extender_binds_total", "Bind requests, by outcome", ["outcome"])


class BadRequest(ValueError):
    """A request body that is not what kube-scheduler sends; answered with 400."""


class ClusterApi(Protocol):
    """The API calls the extender makes (the real one is KubeClusterApi)."""

    def list(self, kind: str) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, kind: str, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None: ...

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None: ...


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class KubeClusterApi:
    def __init__(self, api_client: Any) -> None:
        self.core = k8s.CoreV1Api(api_client)

    def _lister(self, kind: str) -> Callable[..., Any]:
        return self.core.list_node if kind == "nodes" else self.core.list_pod_for_all_namespaces

    def list(self, kind: str) -> tuple[list[dict[str, Any]], str]:
        # Raw JSON: building client model objects for every pod is slow and unneeded.
        response = self._lister(kind)(_preload_content=False, _request_timeout=60)
        doc = json.loads(response.data)
        return doc.get("items") or [], doc["metadata"]["resourceVersion"]

    def watch(self, kind: str, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        # Raw lines, not kubernetes.watch: that builds a client model object for every event (a
        # pod per bind and per status change), a tenth of the extender's CPU under load.
        # The server ends the watch after 300 s; the read timeout catches a dead connection.
        try:
            response = self._lister(kind)(
                watch=True,
                resource_version=resource_version,
                timeout_seconds=300,
                allow_watch_bookmarks=True,
                _preload_content=False,
                _request_timeout=(10, 330),
            )
        except ApiException as exc:
            if exc.status == 410:
                raise Gone(str(exc.reason)) from exc
            raise
        try:
            for line in response:
                if not line.strip():
                    continue
                event = json.loads(line)
                raw = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if raw.get("code") == 410:
                        raise Gone(raw.get("message", "resourceVersion too old"))
                    raise RuntimeError(f"watch error: {raw}")
                yield event["type"], raw
        finally:
            # A stream left half-read cannot go back to the pool as it is: close it first.
            response.close()
            response.release_conn()

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        response: Any = self.core.read_namespaced_pod(name, namespace, _preload_content=False, _request_timeout=10)
        return dict(json.loads(response.data))

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str]) -> None:
        self.core.patch_namespaced_pod(
            name,
            namespace,
            {"metadata": {"annotations": annotations}},
            _content_type=kube.MERGE_PATCH,
            _request_timeout=10,
        )

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        # The API server copies a Binding's annotations onto the pod as it binds it: one call
        # records the GPU and binds, and a pod is never left annotated but unbound.
        body = k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=uid, annotations=annotations or None),
            target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # _preload_content=False: the client cannot deserialize the Binding the server returns.
        # Reading the answer hands the connection back to the pool; left unread, the connection
        # was dropped and every bind paid a new TLS handshake.
        response: Any = self.core.create_namespaced_pod_binding(
            name, namespace, body, _preload_content=False, _request_timeout=10
        )
        response.read()
        response.release_conn()


class Extender:
    """The three verbs over the model; JSON in, JSON-ready objects out."""

    def __init__(self, model: ClusterModel, api: ClusterApi | None = None) -> None:
        self.model = model
        self.api = api
        self.synced = {"nodes": False, "pods": False}
        # Pods filter turned away: uid -> (namespace, name, units, monotonic time of the last nudge).
        self.rejected: dict[str, tuple[str, str, int, float]] = {}
        # prioritize's encoded HostPriority per (node, score).
        self._priority_entries: dict[tuple[str, int], str] = {}

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
            names = [str(((n or {}).get("metadata") or {}).get("name", "")) for n in items]
        if names is None:
            names = []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise BadRequest(f"ExtenderArgs.NodeNames must be a list of node names, got {names!r:.200}")
        return pod, names, items

    def _units(self, pod: Mapping[str, Any]) -> int:
        try:
            return pod_units(pod, self.model.resource)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None

    # --- verbs -----------------------------------------------------------------------------------
    def filter(self, body: Any, tightest: bool = False) -> dict[str, Any]:
        """The nodes where one GPU fits the pod; with `tightest`, only those of them where it packs
        tightest (the highest packing score), so that kube-scheduler needs no prioritize call."""
        pod, names, items = self._args(body)
        units = self._units(pod)
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        with self.model.lock:
            for name in names:
                if units == 0 or self.model.admits(name, units):
                    passed.append(name)
                    continue
                fit = self.model.fit(name, units)
                if fit.unresolvable:
                    unresolvable[name] = fit.reason
                else:
                    failed[name] = fit.reason
            fitting = len(passed)
            if tightest and units and fitting > 1:
                # Ties stay: kube-scheduler's own scores choose among equally tight nodes.
                scores = [self.model.nodes[name].score(units) for name in passed]
                best = max(scores)
                passed = [name for name, score in zip(passed, scores) if score == best]
        DECISIONS.labels("passed").inc(len(passed))
        DECISIONS.labels("looser").inc(fitting - len(passed))
        DECISIONS.labels("failed").inc(len(failed) + len(unresolvable))
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if units and uid and names and not passed:
            self.rejected[uid] = (str(meta.get("namespace", "")), str(meta.get("name", "")), units, 0.0)
        elif uid:
            self.rejected.pop(uid, None)
        result: dict[str, Any] = {
            "NodeNames": passed,
            "Nodes": None,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if items is not None:
            keep = set(passed)
            result["Nodes"] = {"items": [n for n in items if ((n or {}).get("metadata") or {}).get("name") in keep]}
        return result

    def prioritize(self, body: Any) -> bytes:
        """The HostPriorityList, encoded: kube-scheduler waits on this for every pod, and building
        and encoding hundreds of small objects was most of the verb's time."""
        pod, names, _items = self._args(body)
        units = self._units(pod)
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

    def bind(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, Mapping):
            raise BadRequest("expected an ExtenderBindingArgs object")
        fields = {}
        for key in ("PodName", "PodNamespace", "PodUID", "Node"):
            value = body.get(key)
            if not isinstance(value, str) or not value:
                raise BadRequest(f"ExtenderBindingArgs.{key} must be a non-empty string, got {value!r}")
            fields[key] = value
        name, namespace, uid, node = fields["PodName"], fields["PodNamespace"], fields["PodUID"], fields["Node"]
        try:
            error = self._bind(namespace, name, uid, node)
        except Exception as exc:
            log.exception("bind of %s/%s to %s failed", namespace, name, node)
            error = f"binding {namespace}/{name} to {node} failed: {exc}"
        BINDS.labels("error" if error else "bound").inc()
        return {"Error": error}

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        if self.api is None:
            return "the extender has no Kubernetes API connection"
        model = self.model
        pending = model.pending.get(uid)
        units = pending.units if pending else pod_units(self.api.get_pod(namespace, name), model.resource)
        # The GPU is chosen and reserved under the model's lock, so concurrent binds never pick the
        # same free units; the API call then runs outside it, in parallel with other binds.
        with model.lock:
            fit = model.fit(node, units) if units else None
            if units and (fit is None or fit.gpu is None):
                return f"cannot bind {namespace}/{name} to {node}: {fit.reason if fit else ''}"
            if fit is not None and fit.gpu is not None:
                model.reserve(uid, namespace, name, node=node, gpu=fit.gpu, units=units)
        annotations: dict[str, str] = {}
        if fit is not None and fit.gpu is not None:
            annotations = {
                model.uuid_key: fit.gpu.uuid,
                model.index_key: str(fit.gpu.index),
                model.assume_key: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
        try:
            self.api.bind(namespace, name, uid, node, annotations)
        except Exception:
            model.remove_pod(uid)
            raise
        if fit is not None and fit.gpu is not None:
            log.info(
                "bound %s/%s to %s GPU %d",
                namespace,
                name,
                node,
                fit.gpu.index,
                extra={"gpu_uuid": fit.gpu.uuid, "units": units},
            )
        return ""

    # --- nudging rejected pods ---------------------------------------------------------------
    def nudge_once(self, now: float | None = None) -> list[str]:
        """Touch pods that filter rejected and that now fit somewhere, so kube-scheduler retries
        them at once instead of after its unschedulable-pod timeout (5 min by default)."""
        if self.api is None:
            return []
        now = time.monotonic() if now is None else now
        nudged = []
        with self.model.lock:
            for uid in [u for u in self.rejected if u in self.model.placements]:
                del self.rejected[uid]  # bound meanwhile
            largest = max((state.max_free for state in self.model.nodes.values()), default=0)
            due = [
                (uid, entry)
                for uid, entry in self.rejected.items()
                if uid not in self.model.placements and entry[2] <= largest and now - entry[3] >= 5.0
            ]
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for uid, (namespace, name, units, _last) in due:
            try:
                self.api.annotate_pod(namespace, name, {f"{self.model.prefix}/retry-time": stamp})
            except Exception as exc:
                # Usually the pod is gone; forget it.
                log.info("could not nudge %s/%s: %s", namespace, name, exc)
                self.rejected.pop(uid, None)
                continue
            self.rejected[uid] = (namespace, name, units, now)
            nudged.append(uid)
        if nudged:
            log.info("nudged %d pending pod(s) to retry: GPU memory came free", len(nudged))
        return nudged

    def nudge_forever(self, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            if self.model.freed.is_set():
                self.model.freed.clear()
                try:
                    self.nudge_once()
                except Exception as exc:
                    log.warning("nudging rejected pods failed: %s", exc)

    # --- API state -----------------------------------------------------------------------------
    def ready(self) -> tuple[bool, str]:
        if all(self.synced.values()):
            return True, f"synced: {len(self.model.nodes)} GPU nodes, {len(self.model.placements)} placed pods"
        return False, f"waiting for the API: {self.synced}"

    def sync_forever(self, kind: str, stop: threading.Event) -> None:
        """List, then watch; list again after errors or an expired resourceVersion."""
        assert self.api is not None
        backoff = 1.0
        while not stop.is_set():
            try:
                items, version = self.api.list(kind)
                if kind == "nodes":
                    self.model.replace_all(items, None)
                else:
                    self.model.replace_all(None, items)
                # The model is long-lived: keep it out of the collector's full passes, which
                # would otherwise walk every node and pod during requests.
                gc.collect()
                gc.freeze()
                self.synced[kind] = True
                log.info("listed %d %s", len(items), kind)
                backoff = 1.0
                # Watch again from the last version seen when a watch times out; list again
                # only when the version is gone or something failed.
                while not stop.is_set():
                    for event, obj in self.api.watch(kind, version):
                        if stop.is_set():
                            return
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        self._apply(kind, event, obj)
            except Gone as exc:
                log.info("%s watch expired (%s); listing again", kind, exc)
            except Exception as exc:
                log.warning("%s sync failed: %s; retrying in %.0f s", kind, exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _apply(self, kind: str, event: str, obj: dict[str, Any]) -> None:
        if event == "BOOKMARK":
            return
        if kind == "nodes":
            if event == "DELETED":
                self.model.remove_node(str(obj.get("metadata", {}).get("name", "")))
            else:
                self.model.set_node(obj)
        elif event == "DELETED":
            self.model.remove_pod(str(obj.get("metadata", {}).get("uid", "")))
        else:
            self.model.set_pod(obj)


class _Handler(BaseHTTPRequestHandler):
    server: ExtenderServer
    protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses connections

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as separate writes; without this, Nagle plus delayed ACKs add
        # tens of milliseconds to every answer on a kept-alive connection.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, status: int, payload: Any, content_type: str = "application/json") -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        handler = {
            "filter": self.server.extender.filter,
            "filter-tightest": lambda body: self.server.extender.filter(body, tightest=True),
            "prioritize": self.server.extender.prioritize,
            "bind": self.server.extender.bind,
        }.get(verb)
        started = time.perf_counter()
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise BadRequest(f"request body of {length} bytes is over the {MAX_BODY}-byte limit")
            raw = self.rfile.read(length)
            if handler is None:
                expected = "filter, filter-tightest, prioritize or bind"
                self._send(404, {"Error": f"unknown verb {verb!r}; expected {expected}"})
                return
            try:
                body = json.loads(raw)
            except ValueError as exc:
                raise BadRequest(f"{verb}: body is not JSON: {exc}") from None
            self._send(200, handler(body))
        except BadRequest as exc:
            self._send(400, {"Error": f"{verb}: {exc}"})
        except Exception as exc:
            log.exception("%s failed", verb)
            self._send(500, {"Error": f"{verb}: internal error: {exc}"})
        finally:
            REQUESTS.labels(verb if handler else "unknown").observe(time.perf_counter() - started)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        extender = self.server.extender
        if path.endswith("/healthz"):
            self._send(200, b"ok\n", "text/plain")
        elif path.endswith("/readyz"):
            ok, reason = extender.ready()
            self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain")
        elif path.endswith("/metrics"):
            self._send(200, prometheus_client.generate_latest(), prometheus_client.CONTENT_TYPE_LATEST)
        else:
            self._send(404, b"not found\n", "text/plain")

    def log_message(self, format: str, *args: object) -> None:
        """kube-scheduler calls several times per pod; decisions are logged elsewhere."""


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: str, port: int, extender: Extender) -> None:
        self.extender = extender
        super().__init__((address, port), _Handler)


DESCRIPTION = (
    "kube-scheduler extender (filter or filter-tightest, prioritize, bind) that admits a pod on a node only "
    "where one GPU has its <resource_prefix>/gpu-memory free (config keys: resource_prefix and the "
    "extender section)."
)


def main(argv: list[str] | None = None) -> int:
    started = config.start(
        "gpushare-scheduler-extender",
        DESCRIPTION,
        __version__,
        argv,
        kubeconfig_help="kubeconfig file (default: in-cluster config, then ~/.kube/config)",
    )
    if started is None:
        return 2
    args, cfg = started
    section = cfg["extender"]
    model = ClusterModel(cfg["resource_prefix"], float(section["reservation_ttl_s"]))
    api: ClusterApi | None = None
    try:
        api = KubeClusterApi(kube.api_client(args.kubeconfig))
    except Exception as exc:
        log.error("no Kubernetes API (%s): filter answers from an empty model and bind fails", exc)
    extender = Extender(model, api)
    server = ExtenderServer(section["address"], section["port"], extender)
    stop = threading.Event()

    def shutdown(*_: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    if api is not None:
        for kind in ("nodes", "pods"):
            threading.Thread(target=extender.sync_forever, args=(kind, stop), name=f"sync-{kind}", daemon=True).start()

        def expire() -> None:
            while not stop.wait(10):
                model.expire_reservations()

        threading.Thread(target=expire, name="expire", daemon=True).start()
        threading.Thread(target=extender.nudge_forever, args=(stop,), name="nudge", daemon=True).start()
    log.info("listening on %s:%d", section["address"], server.server_address[1])
    server.serve_forever()
    server.server_close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
