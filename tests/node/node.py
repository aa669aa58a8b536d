"""Helpers for the e2e node tests: kubectl on the node (its admin.conf), JSON out, and waiting.

The node is the container tests/node/node.sh starts and playbooks/site.yml provisions; kubectl
runs inside it through `docker exec`, so the tests need nothing on this machine but Docker.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any, TypeVar

from tests import polling

NODE = os.environ.get("VGPU_E2E_NODE", "vgpu-e2e-node")
# The path the node was provisioned with (run-e2e.sh: vgpu_scheduling), which decides the suite.
SCHEDULING = os.environ.get("VGPU_E2E_SCHEDULING", "extender")
PREFIX = "vgpu.io"
RESOURCE = f"{PREFIX}/gpu-memory"
# The DRA driver's name and DeviceClass (vgpu_scheduling: dra).
DRIVER = f"gpu.{PREFIX}"
UNIT_MIB = 100
# The fake driver's GPUs (tests/node/fake_gpu.yml): 2 x 12288 MiB.
GPU_COUNT = 2
GPU_MIB = 12288
IMAGE = "localhost/vgpu-components:0.1.0"

T = TypeVar("T")


def kubectl(
    *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120, stderr: bool = False
) -> str:
    """Run kubectl on the node with the cluster's admin kubeconfig; stdout (and stderr when asked), or
    CalledProcessError."""
    cmd = ["docker", "exec", "-i", NODE, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", *args]
    result = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise subprocess.CalledProcessError(result.returncode, cmd, result.stdout, result.stderr)
    return result.stdout + (result.stderr if stderr else "")


def exec_node(*args: str, timeout: float = 60) -> str:
    """Run a command on the node itself; its stdout, or CalledProcessError."""
    cmd = ["docker", "exec", NODE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=True).stdout


def get(kind: str, name: str = "", namespace: str = "") -> Any:
    args = ["get", kind, *([name] if name else []), "-o", "json"]
    if namespace:
        args += ["-n", namespace]
    return json.loads(kubectl(*args))


def apply(namespace: str, *objects: dict[str, Any]) -> None:
    manifest = {"apiVersion": "v1", "kind": "List", "items": objects}
    kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(manifest))


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 2) -> T:
    """tests.polling.wait_for, every 2 s: each check here runs kubectl in the node container."""
    return polling.wait_for(what, check, timeout, interval)


def pods(namespace: str, selector: str = "") -> list[dict[str, Any]]:
    args = ["get", "pods", "-n", namespace, "-o", "json"]
    if selector:
        args += ["-l", selector]
    return list(json.loads(kubectl(*args))["items"])


def running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return pod["status"].get("phase") == "Running" and bool(statuses) and all(s.get("ready") for s in statuses)


def app_pod(
    name: str,
    command: list[str],
    *,
    resources: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod that runs `command` once in the component image (never pulled: the node is offline)."""
    container: dict[str, Any] = {"name": "app", "image": IMAGE, "imagePullPolicy": "Never", "command": command}
    if resources is not None:
        container["resources"] = resources
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {"app": name}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def gpu_pod(name: str, units: int, command: list[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod that asks for `units` of GPU memory and runs `command` in the component image."""
    return app_pod(name, command, resources={"limits": {RESOURCE: units}}, labels=labels)


def claim_pod(name: str, mib: int, command: list[str]) -> list[dict[str, Any]]:
    """The DRA path's GPU pod: a ResourceClaimTemplate for `mib` MiB of one GPU and a pod whose
    container uses it."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": f"{mib}Mi"}}},
                        }
                    ]
                }
            }
        },
    }
    pod = app_pod(name, command, resources={"claims": [{"name": "gpu"}]})
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": name}]
    return [template, pod]


def quota_pod(name: str, mib: int, command: list[str]) -> list[dict[str, Any]]:
    """A pod with a GPU-memory quota of `mib` MiB on the path the node was provisioned with: units
    of the device plugin (extender) or a claim (dra); the pod is the last object."""
    if SCHEDULING == "dra":
        return claim_pod(name, mib, command)
    return [gpu_pod(name, mib // UNIT_MIB, command)]


def component_pods() -> dict[str, list[dict[str, Any]]]:
    """The pods of kube-system by component (their app.kubernetes.io/name label)."""
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in pods("kube-system"):
        name = pod["metadata"].get("labels", {}).get("app.kubernetes.io/name", "")
        found.setdefault(name, []).append(pod)
    return found


def stats(namespace: str, pod: str) -> dict[str, int]:
    """libvgpu's own report inside the pod (manage --stats --json), of its one GPU, in MiB."""
    report = json.loads(kubectl("exec", "-n", namespace, pod, "--", "/opt/vgpu/manage", "--stats", "--json"))
    device = report["devices"][0]
    return {"quota_mib": device["limit_bytes"] >> 20, "used_mib": device["used_bytes"] >> 20}


def placed_gpu(namespace: str, name: str) -> str:
    """The UUID of the GPU the extender bound the pod to."""
    return str(get("pod", name, namespace)["metadata"]["annotations"][f"{PREFIX}/gpu-uuid"])
