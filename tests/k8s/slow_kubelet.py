"""A slow kubelet for the end-to-end suite: nodes that kwok does not manage, whose pods this stand-in
takes one step at a time, `step` seconds apart (a deleted pod goes, a new pod starts but is not
Ready, a started pod becomes Ready). A rollout onto these nodes is slow but never stands still:
the shape of a cold CI run on a loaded machine (issue 27). It keeps its nodes' Leases fresh, so
the node lifecycle controller keeps them Ready.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from types import TracebackType
from typing import Any

from kubernetes import client

LEASE_NAMESPACE = "kube-node-lease"
RENEW_EVERY = 5.0


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_body(name: str, labels: dict[str, str]) -> dict[str, Any]:
    """A Ready node without kwok's annotation: kwok leaves it and its pods to this kubelet."""
    resources = {"cpu": "16", "memory": "64Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **labels},
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": _now(),
                    "lastTransitionTime": _now(),
                }
            ],
        },
    }


def running_status(pod: Any, ready: bool) -> dict[str, Any]:
    """The status a kubelet reports for a started pod, Ready or not yet."""
    now = _now()
    state = "True" if ready else "False"
    conditions = [("PodScheduled", "True"), ("Initialized", "True"), ("ContainersReady", state), ("Ready", state)]
    return {
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": t, "status": s, "lastTransitionTime": now} for t, s in conditions],
            "containerStatuses": [
                {
                    "name": c.name,
                    "image": c.image,
                    "imageID": "",
                    "ready": ready,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                }
                for c in pod.spec.containers
            ],
        }
    }


class SlowKubelet:
    """`with SlowKubelet(core, names, labels) as kubelet:` the nodes exist and their pods move one
    step every `kubelet.step` seconds (0: as fast as it polls); `kubelet.steps` counts the steps."""

    def __init__(self, core: Any, names: list[str], labels: dict[str, str]) -> None:
        self.core = core
        self.leases: Any = client.CoordinationV1Api(core.api_client)
        self.names = names
        self.labels = labels
        self.step = 0.0
        self.steps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-kubelet", daemon=True)
        self._error: BaseException | None = None

    def __enter__(self) -> SlowKubelet:
        for name in self.names:
            self.core.create_node(node_body(name, self.labels))
            self.core.patch_node_status(name, {"status": node_body(name, self.labels)["status"]})
            lease = {"metadata": {"name": name}, "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}}
            self.leases.create_namespaced_lease(LEASE_NAMESPACE, lease)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        # The nodes first, so that no controller puts new pods on them; then what they ran.
        for name in self.names:
            self.core.delete_node(name)
            self.leases.delete_namespaced_lease(name, LEASE_NAMESPACE)
        for name in self.names:
            for pod in self._pods(name):
                self.core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        if self._error is not None and kind is None:
            raise RuntimeError("the slow kubelet failed") from self._error

    def _pods(self, node: str) -> list[Any]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        return sorted(pods, key=lambda p: p.metadata.creation_timestamp)

    def _renew(self) -> None:
        now = datetime.now(timezone.utc)
        for name in self.names:
            self.leases.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": {"renewTime": now.isoformat()}})

    def _advance_one(self) -> bool:
        """Take the first pod that is not done one step further; False when every pod is done."""
        for node in self.names:
            for pod in self._pods(node):
                name, namespace = pod.metadata.name, pod.metadata.namespace
                ready = any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))
                if pod.metadata.deletion_timestamp:
                    self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
                elif pod.status.phase != "Running":
                    self.core.patch_namespaced_pod_status(name, namespace, running_status(pod, ready=False))
                elif not ready:
                    self.core.patch_namespaced_pod_status(name, namespace, running_status(pod, ready=True))
                else:
                    continue
                self.steps += 1
                return True
        return False

    def _run(self) -> None:
        renewed = next_step = 0.0
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                if now - renewed >= RENEW_EVERY:
                    self._renew()
                    renewed = now
                if now >= next_step and self._advance_one():
                    next_step = now + self.step
                self._stop.wait(0.5)
        except BaseException as error:  # reported by __exit__
            self._error = error
