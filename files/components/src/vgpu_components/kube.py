"""The Kubernetes API through the official `kubernetes` client: config loading and node writes."""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config

log = logging.getLogger(__name__)
# The client would pick JSON Patch for PATCH; our bodies are merge patches.
MERGE_PATCH = "application/merge-patch+json"


def api_client(kubeconfig: str | None = None) -> Any:
    """An ApiClient from --kubeconfig when given, else in-cluster config, else ~/.kube/config."""
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig)
    else:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
    return k8s.ApiClient()


class NodeApi(Protocol):
    """What the device plugin writes to the API server (never in the Allocate path)."""

    def annotate_node(self, node: str, annotations: dict[str, str]) -> None: ...

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None: ...


class KubeNodeApi:
    def __init__(self, client: Any, component: str) -> None:
        self.core = k8s.CoreV1Api(client)
        self.component = component

    def annotate_node(self, node: str, annotations: dict[str, str]) -> None:
        self.core.patch_node(node, {"metadata": {"annotations": annotations}}, _content_type=MERGE_PATCH)

    def node_event(self, node: str, reason: str, message: str, event_type: str = "Warning") -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        body = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{node}.{self.component}.", namespace="default"),
            involved_object=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node, uid=node),
            reason=reason,
            message=message[:1024],
            type=event_type,
            source=k8s.V1EventSource(component=self.component, host=node),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        self.core.create_namespaced_event("default", body)


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
