"""The Kubernetes API through the official `kubernetes` client: config loading, the informer
(list, then watch), the extender's reads and binds, the device plugin's node writes.

Every adapter here has a small Protocol so that tests can put a recording fake in its place;
tests/k8s runs the real ones against kube-apiserver.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)
# The client would pick JSON Patch for PATCH; our bodies are merge patches.
MERGE_PATCH = "application/merge-patch+json"


def api_client(kubeconfig: str | None = None, *, connections: int = 0) -> Any:
    """An ApiClient from --kubeconfig when given, else in-cluster config, else ~/.kube/config.
    `connections`: how many threads call it at once (its pool keeps that many; the client's own
    default, 5 per CPU, is 10 on a 2-core node, and each connection dropped past it is a new TLS
    handshake for kube-apiserver at the next burst)."""
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    configuration = k8s.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, connections)
    return k8s.ApiClient(configuration)


class NodeApi(Protocol):
    """What the device plugin reads from and writes to the API server (never in the Allocate path)."""

    def node_labels(self, node: str) -> dict[str, str]: ...

    def annotate_node(self, node: str, annotations: dict[str, str]) -> None: ...

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None: ...


class KubeNodeApi:
    def __init__(self, client: Any, component: str) -> None:
        self.core = k8s.CoreV1Api(client)
        self.component = component

    def annotate_node(self, node: str, annotations: dict[str, str]) -> None:
        self.core.patch_node(node, {"metadata": {"annotations": annotations}}, _content_type=MERGE_PATCH)

    def node_labels(self, node: str) -> dict[str, str]:
        response: Any = self.core.read_node(node, _preload_content=False, _request_timeout=10)
        return dict((json.loads(response.data).get("metadata") or {}).get("labels") or {})

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None:
        post_node_event(self.core, self.component, node, reason=reason, message=message, event_type=event_type)


def post_node_event(core: Any, component: str, node: str, *, reason: str, message: str, event_type: str) -> None:
    """A core/v1 Event about a node (in the default namespace, as kubelet posts its node events)."""
    involved = k8s.V1ObjectReference(api_version="v1", kind="Node", name=node, uid=node)
    body = event(
        involved, namespace="default", component=component, host=node, reason=reason, message=message,
        event_type=event_type,
    )  # fmt: skip
    core.create_namespaced_event("default", body, _request_timeout=10)


def post_pod_event(
    core: Any, component: str, host: str, pod: dict[str, Any], *, reason: str, message: str, event_type: str
) -> None:
    """A core/v1 Event about a pod, in its namespace."""
    meta = pod["metadata"]
    involved = k8s.V1ObjectReference(
        api_version="v1", kind="Pod", name=meta["name"], namespace=meta["namespace"], uid=meta["uid"]
    )
    body = event(
        involved, namespace=meta["namespace"], component=component, host=host, reason=reason, message=message,
        event_type=event_type,
    )  # fmt: skip
    core.create_namespaced_event(meta["namespace"], body, _request_timeout=10)


def event(
    involved: Any, *, namespace: str, component: str, host: str, reason: str, message: str, event_type: str
) -> Any:
    """A core/v1 Event about `involved` (an object reference), as kubelet posts them."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name=f"{involved.name}.{component}.", namespace=namespace),
        involved_object=involved,
        reason=reason,
        message=message[:1024],
        type=event_type,
        source=k8s.V1EventSource(component=component, host=host),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )


# --- the monitor's reads, events and evictions --------------------------------------------------
class PodApi(Protocol):
    """What cgpu-monitor's enforcement asks of the API server."""

    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, event_type: str = "Warning") -> None: ...

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None: ...

    def evict(self, namespace: str, name: str, uid: str, grace_seconds: int | None = None) -> None: ...


def pods_on_node(core: Any, node: str) -> list[dict[str, Any]]:
    """The pods bound to `node`, as recent as the API server's state (no resourceVersion: a
    consistent read)."""
    response: Any = core.list_pod_for_all_namespaces(
        field_selector=f"spec.nodeName={node}", _preload_content=False, _request_timeout=30
    )
    return list(json.loads(response.data).get("items") or [])


class KubePodApi:
    def __init__(self, client: Any, component: str, node: str) -> None:
        self.core = k8s.CoreV1Api(client)
        self.component = component
        self.node = node

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return pods_on_node(self.core, node)

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, event_type: str = "Warning") -> None:
        post_pod_event(self.core, self.component, self.node, pod, reason=reason, message=message, event_type=event_type)

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None:
        post_node_event(self.core, self.component, node, reason=reason, message=message, event_type=event_type)

    def evict(self, namespace: str, name: str, uid: str, grace_seconds: int | None = None) -> None:
        """Evict the pod of this UID by deleting it, as kubelet evicts a pod over its
        ephemeral-storage limit: no PodDisruptionBudget applies (a tenant's budget would otherwise
        keep a pod over its quota running), and an admission policy holds the monitor's deletes to
        its own node (roles/vgpu_stack). `grace_seconds`: the grace period (None: the pod's own; a
        shorter one shortens that of a pod already terminating, and kubelet follows; 0 removes the
        API object at once and kubelet kills its containers). A pod already gone, or replaced by
        another of the same name, is fine."""
        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid), grace_period_seconds=grace_seconds)
        try:
            self.core.delete_namespaced_pod(name, namespace, body=options, _request_timeout=10)
        except ApiException as exc:
            if exc.status in (404, 409):  # gone, or the name is another pod's now
                return
            raise


def try_event(api: NodeApi | None, node: str, reason: str, message: str) -> None:
    """Post a node event when an API is configured; a failure is logged, never fatal."""
    if api is None:
        return
    try:
        api.node_event(node, reason, message)
    except Exception as exc:
        log.warning("could not post node event %s: %s", reason, exc)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


# --- list and watch ----------------------------------------------------------------------------
class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


class ListWatchApi(Protocol):
    """Full lists and watches of one kind ("nodes" or "pods"), as raw JSON objects."""

    def list(self, kind: str) -> tuple[list[dict[str, Any]], str]: ...

    def watch(self, kind: str, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]: ...


class Informer:
    """Keeps a consumer in step with one kind: list, then watch from the list's version; watch
    again after a timeout, list again after an error or an expired version (410 Gone).

    `on_list(items)` gets every full list, `on_event(type, object)` every watch event but bookmarks.
    """

    def __init__(
        self,
        api: ListWatchApi,
        kind: str,
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        self.api = api
        self.kind = kind
        self.on_list = on_list
        self.on_event = on_event
        self.synced = False  # True once a first full list was handed over

    def run(self, stop: threading.Event) -> None:
        backoff = 1.0
        while not stop.is_set():
            try:
                items, version = self.api.list(self.kind)
                self.on_list(items)
                self.synced = True
                log.info("listed %d %s", len(items), self.kind)
                backoff = 1.0
                while not stop.is_set():
                    for event, obj in self.api.watch(self.kind, version):
                        if stop.is_set():
                            return
                        version = (obj.get("metadata") or {}).get("resourceVersion") or version
                        if event != "BOOKMARK":
                            self.on_event(event, obj)
            except Gone as exc:
                log.info("%s watch expired (%s); listing again", self.kind, exc)
            except Exception as exc:
                log.warning("%s sync failed: %s; retrying in %.0f s", self.kind, exc, backoff)
                stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)


# --- the extender's reads and binds ------------------------------------------------------------
class ClusterApi(ListWatchApi, Protocol):
    """The API calls the extender makes (the real one is KubeClusterApi): reads and the Binding,
    nothing else, so its RBAC is get/list/watch of nodes and pods, list of PodDisruptionBudgets
    and create of events (preempt) and create of pods/binding."""

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def pods_on_node(self, node: str) -> list[dict[str, Any]]: ...

    def disruption_budgets(self) -> list[dict[str, Any]]: ...

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, event_type: str = "Warning") -> None: ...

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None: ...


class KubeClusterApi:
    def __init__(self, api_client: Any, host: str = "") -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.host = host  # the node the extender runs on, the source of its events

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return pods_on_node(self.core, node)

    def pod_event(self, pod: dict[str, Any], reason: str, message: str, event_type: str = "Warning") -> None:
        post_pod_event(
            self.core, "gpushare-scheduler-extender", self.host, pod,
            reason=reason, message=message, event_type=event_type,
        )  # fmt: skip

    def disruption_budgets(self) -> list[dict[str, Any]]:
        """Every namespace's PodDisruptionBudgets (policy/v1), with their status."""
        response: Any = k8s.PolicyV1Api(self.core.api_client).list_pod_disruption_budget_for_all_namespaces(
            _preload_content=False, _request_timeout=30
        )
        return list(json.loads(response.data).get("items") or [])

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

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]) -> None:
        # The API server copies a Binding's annotations onto the pod as it binds it: one call
        # records the GPU and binds, and a pod is never left annotated but unbound.
        metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            metadata["annotations"] = annotations
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        # The Binding goes as the JSON it is, through the client's REST layer (its authentication
        # and connection pool): create_namespaced_pod_binding's argument validation and model
        # serialization were a fifth of a bind's CPU in the extender (docs/benchmarks.md).
        client = self.core.api_client
        request = client.param_serialize(
            method="POST",
            resource_path="/api/v1/namespaces/{namespace}/pods/{name}/binding",
            path_params={"namespace": namespace, "name": name},
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = client.call_api(*request, _request_timeout=10)
        # Reading the answer hands the connection back to the pool; left unread, the connection
        # was dropped and every bind paid a new TLS handshake.
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)


# --- the DRA driver's reads and its ResourceSlice ----------------------------------------------
class DraApi(Protocol):
    """What the DRA driver asks of the API server (the real one is KubeDraApi): its claims and
    their pods are read, only its own node's ResourceSlice is written."""

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]: ...

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def node_uid(self, node: str) -> str: ...

    def list_slices(self, node: str, driver: str) -> list[dict[str, Any]]: ...

    def create_slice(self, body: dict[str, Any]) -> None: ...

    def replace_slice(self, name: str, body: dict[str, Any]) -> None: ...

    def delete_slice(self, name: str) -> None: ...


class KubeDraApi:
    def __init__(self, api_client: Any) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.resource = k8s.ResourceV1Api(api_client)

    @staticmethod
    def _json(response: Any) -> dict[str, Any]:
        return dict(json.loads(response.data))

    @staticmethod
    def _drain(response: Any) -> None:
        # Raw answers: the client's models are not needed, and reading hands the connection back.
        response.read()
        response.release_conn()

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(
            self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False, _request_timeout=10)
        )

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self._json(self.core.read_namespaced_pod(name, namespace, _preload_content=False, _request_timeout=10))

    def node_uid(self, node: str) -> str:
        node_doc = self._json(self.core.read_node(node, _preload_content=False, _request_timeout=10))
        return str(node_doc["metadata"]["uid"])

    def list_slices(self, node: str, driver: str) -> list[dict[str, Any]]:
        response = self.resource.list_resource_slice(
            field_selector=f"spec.nodeName={node},spec.driver={driver}", _preload_content=False, _request_timeout=30
        )
        return list(self._json(response).get("items") or [])

    # The body goes as the JSON it is (the client serialises a dict unchanged): a client model older
    # than the API server would drop the fields it does not know.
    def create_slice(self, body: dict[str, Any]) -> None:
        self._drain(self.resource.create_resource_slice(cast(Any, body), _preload_content=False, _request_timeout=10))

    def replace_slice(self, name: str, body: dict[str, Any]) -> None:
        raw = cast(Any, body)
        self._drain(self.resource.replace_resource_slice(name, raw, _preload_content=False, _request_timeout=10))

    def delete_slice(self, name: str) -> None:
        try:
            self._drain(self.resource.delete_resource_slice(name, _preload_content=False, _request_timeout=10))
        except ApiException as exc:
            if exc.status != 404:
                raise
