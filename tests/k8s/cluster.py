"""Helpers for the end-to-end tests and the throughput benchmark on the local control plane.

The control plane is started by tests/k8s/scripts/up.sh; its state folder (kubeconfigs, logs,
pids) is $VGPU_K8S_STATE_DIR, default build/k8s. Simulated nodes are plain Node objects that
kwok keeps Ready; they carry the `vgpu.io/gpus` annotation the device plugin would publish.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import ssl
import subprocess
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, config

from tests.polling import wait_for

K8S_DIR = Path(__file__).resolve().parent
REPO_ROOT = K8S_DIR.parent.parent
STATE_DIR = Path(os.environ.get("VGPU_K8S_STATE_DIR", str(REPO_ROOT / "build" / "k8s"))).resolve()
CTL = K8S_DIR / "scripts" / "ctl.sh"
_VERSIONS = dict(
    line.split("=", 1) for line in (REPO_ROOT / "files/bundle/versions.env").read_text().splitlines() if "=" in line
)
# The control plane's binaries (tests/k8s/scripts/lib.sh exports BIN_DIR to the suite).
BIN_DIR = Path(
    os.environ.get("BIN_DIR")
    or Path(os.environ.get("VGPU_CACHE_DIR", Path.home() / ".cache/vgpu-isolation")) / "k8s" / _VERSIONS["K8S_VERSION"]
)

PREFIX = "vgpu.io"
RESOURCE = f"{PREFIX}/gpu-memory"
UNIT_MIB = 100
GPU_12GIB = 12288
GROUP_LABEL = "e2e.vgpu.io/group"
ANNOTATION_UUID = f"{PREFIX}/gpu-uuid"
ANNOTATION_INDEX = f"{PREFIX}/gpu-index"

# make(count, gpus_mib=None) -> the node selector of `count` new Ready GPU nodes (conftest.gpu_nodes).
NodeFactory = Callable[..., dict[str, str]]


def api_client(kubeconfig: Path | None = None) -> Any:
    """An ApiClient for the admin kubeconfig of the running control plane."""
    path = kubeconfig or STATE_DIR / "admin.kubeconfig"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: start the control plane with 'make -C tests/k8s up'")
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    return client.ApiClient(configuration)


def ctl(*args: str, timeout: float = 90, env: Mapping[str, str] | None = None) -> None:
    """Start or stop one part of the control plane through scripts/ctl.sh (extra `env` for it)."""
    env = dict(os.environ, VGPU_K8S_STATE_DIR=str(STATE_DIR), **(env or {}))
    subprocess.run([str(CTL), *args], check=True, timeout=timeout, env=env)


def units(mib: int) -> int:
    """Units of vgpu.io/gpu-memory a pod asks for to get `mib` MiB (rounded up)."""
    return -(-mib // UNIT_MIB)


def gpu_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}.{index}.e2e.vgpu.io"))


def gpus_annotation(node: str, gpus_mib: Iterable[int]) -> str:
    """The `vgpu.io/gpus` node annotation as the device plugin publishes it (docs/architecture.md)."""
    gpus = []
    for index, total in enumerate(gpus_mib):
        uid = gpu_uuid(node, index)
        gpus.append(
            {
                "uuid": uid,
                "index": index,
                "key": hashlib.sha256(uid.encode()).hexdigest()[:6],
                "total_mib": total,
                "units": total // UNIT_MIB,
                "used_units": 0,
                "healthy": True,
            }
        )
    return json.dumps({"unit_mib": UNIT_MIB, "gpus": gpus}, separators=(",", ":"))


def node_body(name: str, gpus_mib: Iterable[int], labels: Mapping[str, str]) -> dict[str, Any]:
    """A simulated GPU node: kwok keeps it Ready; capacity advertises the GPUs' units."""
    gpus = list(gpus_mib)
    resources = {
        "cpu": "64",
        "memory": "512Gi",
        "pods": "500",
        RESOURCE: str(sum(total // UNIT_MIB for total in gpus)),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                f"{PREFIX}/gpus": gpus_annotation(name, gpus),
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                f"{PREFIX}/gpu-node": "true",
                **labels,
            },
        },
        "status": {"capacity": resources, "allocatable": resources},
    }


def node_ready(node: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def pod_body(
    name: str, gpu_mib: int | None, node_selector: Mapping[str, str], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A pod asking for `gpu_mib` MiB of GPU memory (None: no GPU at all) on the selected nodes."""
    limits = {RESOURCE: str(units(gpu_mib))} if gpu_mib is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "nodeSelector": dict(node_selector),
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    # kwok never runs containers, so the image is never pulled.
                    "image": "localhost/vgpu-e2e:none",
                    "resources": {"limits": limits, "requests": dict(limits)},
                }
            ],
        },
    }


def scheduling_events(core: Any, namespace: str, pod: str) -> list[str]:
    """Messages of the FailedScheduling events of one pod, oldest first."""
    events = core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={pod},reason=FailedScheduling"
    ).items
    return [e.message or "" for e in events]


def bound_node(core: Any, namespace: str, pod: str) -> str | None:
    return core.read_namespaced_pod(pod, namespace).spec.node_name or None


def wait_bound(core: Any, namespace: str, name: str, timeout: float = 60) -> Any:
    """The pod once the scheduler (through the extender, for GPU pods) has bound it."""

    def check() -> Any:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.spec.node_name else None

    return wait_for(f"pod {namespace}/{name} bound", check, timeout=timeout)


def extender_port() -> int:
    """The extender's port, as up.sh wrote it to the state folder's env file."""
    for line in (STATE_DIR / "env").read_text().splitlines():
        key, _sep, value = line.partition("=")
        if key == "VGPU_E2E_EXTENDER_PORT":
            return int(value)
    raise KeyError(f"VGPU_E2E_EXTENDER_PORT is not in {STATE_DIR / 'env'}")


def extender_request(method: str, path: str, body: Any = None, timeout: float = 10) -> tuple[int, bytes]:
    """One request to the running extender as kube-scheduler makes it: HTTPS with kube-scheduler's
    client certificate for the extender (plain HTTP when a test started it plain)."""
    conn: http.client.HTTPConnection
    if (STATE_DIR / "extender-plain").exists():
        conn = http.client.HTTPConnection("127.0.0.1", extender_port(), timeout=timeout)
    else:
        pki = STATE_DIR / "pki"
        context = ssl.create_default_context(cafile=str(pki / "extender-ca.crt"))
        context.load_cert_chain(str(pki / "scheduler-extender-client.crt"), str(pki / "scheduler-extender-client.key"))
        conn = http.client.HTTPSConnection("127.0.0.1", extender_port(), timeout=timeout, context=context)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def extender_get(path: str) -> bytes:
    status, body = extender_request("GET", path)
    if status != 200:
        raise RuntimeError(f"extender GET {path}: {status} {body[:200]!r}")
    return body


def write_kubeconfig(path: Path, cluster: dict[str, str], user: dict[str, str]) -> Path:
    """A kubeconfig of one cluster and one user (their kubeconfig fields), readable by its owner only."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": "e2e", "user": user}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e"}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(doc))  # JSON is YAML
    path.chmod(0o600)
    return path


def token_kubeconfig(path: Path, token: str) -> Path:
    """A kubeconfig for the running API server that authenticates with a bearer token."""
    admin = (STATE_DIR / "admin.kubeconfig").read_text()
    server = next(line.split(":", 1)[1].strip() for line in admin.splitlines() if line.strip().startswith("server:"))
    ca = str(STATE_DIR / "pki" / "ca.crt")
    return write_kubeconfig(path, {"server": server, "certificate-authority": ca}, {"token": token})
