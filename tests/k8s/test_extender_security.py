"""The extender's hardening (issue 12) with the real kube-scheduler and kube-apiserver.

kube-scheduler reaches the extender over HTTPS with its client certificate (the extender's own
CA, tests/k8s/scripts/gen-certs.sh), the way roles/vgpu_stack configures it; every other test of
this suite schedules through that connection. Nodes are simulated by kwok (there is no GPU here).
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
from typing import Any

import pytest
from vgpu_components import kube
from vgpu_components.extender_http import Later
from vgpu_components.extender_verbs import Extender
from vgpu_components.scheduling import ClusterModel

from tests.k8s import cluster

SCHEDULE_TIMEOUT = 60


def tls_request(context: ssl.SSLContext, port: int, request_line: bytes) -> bytes:
    """One bodiless request over TLS; the start of the answer."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request_line + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        answer = tls.recv(100)
    if not answer:
        raise ConnectionError("closed without an answer")
    return answer


def test_only_kube_schedulers_certificate_is_answered(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory
) -> None:
    selector = gpu_nodes(1)
    core.create_namespaced_pod(namespace, cluster.pod_body("through-mtls", 2000, selector))
    pod = cluster.wait_bound(core, namespace, "through-mtls", SCHEDULE_TIMEOUT)
    assert cluster.ANNOTATION_UUID in (pod.metadata.annotations or {}), "bound without the extender"

    port = cluster.extender_port()
    pki = cluster.STATE_DIR / "pki"
    args = {"Pod": core.api_client.sanitize_for_serialization(pod), "NodeNames": []}
    status, _answer = cluster.extender_request("POST", "/filter", args)
    assert status == 200  # kube-scheduler's client certificate
    # Without a certificate only the health endpoints answer (kubelet's probes present none).
    context = ssl.create_default_context(cafile=str(pki / "extender-ca.crt"))
    assert tls_request(context, port, b"GET /healthz").startswith(b"HTTP/1.1 200")
    assert tls_request(context, port, b"POST /filter").startswith(b"HTTP/1.1 403")
    # A certificate of the cluster CA (every kubelet has one) fails the handshake.
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_request(context, port, b"GET /healthz")
    plain = subprocess.run(
        ["curl", "-s", "--max-time", "5", f"http://127.0.0.1:{port}/healthz"], capture_output=True, check=False
    )
    assert b"ok" not in plain.stdout


def test_a_pod_turned_away_is_placed_when_memory_frees_without_the_extender_touching_it(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory
) -> None:
    """kube-scheduler 1.36 requeues a pod an extender rejected on the next cluster event; the
    extender no longer patches pending pods to wake them. The retry comes the moment kube-scheduler
    sees fill-0 go, often before the extender's watch shows it: the extender reads the node's pods
    again before it refuses (the test below), or the pod waited for the next event, up to 5 min."""
    selector = gpu_nodes(1)  # 2 x 12 GiB
    # 8000 MiB on each GPU: the node has 8400 MiB free in all (kube-scheduler's own fit passes),
    # no GPU has 6000 MiB (the extender turns the pod away).
    for name in ("fill-0", "fill-1"):
        core.create_namespaced_pod(namespace, cluster.pod_body(name, 8000, selector))
        cluster.wait_bound(core, namespace, name, SCHEDULE_TIMEOUT)
    core.create_namespaced_pod(namespace, cluster.pod_body("waiting", 6000, selector))
    cluster.wait_for(
        "the extender's FailedScheduling reason for the waiting pod",
        lambda: any(
            "no single GPU with 6000 MiB free" in m for m in cluster.scheduling_events(core, namespace, "waiting")
        ),
        timeout=SCHEDULE_TIMEOUT,
    )
    core.delete_namespaced_pod("fill-0", namespace, grace_period_seconds=0)
    pod = cluster.wait_bound(core, namespace, "waiting", timeout=60)
    assert not any(key.endswith("/retry-time") for key in (pod.metadata.annotations or {})), pod.metadata.annotations


def test_a_refusal_is_read_again_from_the_api_server_when_the_watch_is_behind(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory
) -> None:
    """An extender whose model was listed before a pod was deleted (its watch not yet delivered)
    reads the node's pods from the real API server before refusing, and places the pod."""
    selector = gpu_nodes(1)  # 2 x 12 GiB
    for name in ("fill-0", "fill-1"):
        core.create_namespaced_pod(namespace, cluster.pod_body(name, 8000, selector))
    node = cluster.wait_bound(core, namespace, "fill-0", SCHEDULE_TIMEOUT).spec.node_name
    cluster.wait_bound(core, namespace, "fill-1", SCHEDULE_TIMEOUT)
    api = kube.KubeClusterApi(cluster.api_client())
    behind = Extender(ClusterModel(cluster.PREFIX), api)
    behind.model.replace_all(api.list("nodes")[0], api.list("pods")[0])  # its watch never runs
    waiting = core.api_client.sanitize_for_serialization(cluster.pod_body("waiting", 6000, selector))
    waiting["metadata"]["uid"] = "uid-waiting"
    args = {"Pod": waiting, "Nodes": None, "NodeNames": [node]}

    def judged() -> dict[str, Any]:
        answer = behind.filter(args)
        assert isinstance(answer, Later), answer  # a refusal is read again, on a worker thread
        result: dict[str, Any] = answer.finish()
        return result

    refused = judged()  # the API holds both pods too: the refusal stands
    assert refused["NodeNames"] == []
    assert refused["FailedNodes"] == {node: "no single GPU with 6000 MiB free; largest free 4200 MiB"}
    core.delete_namespaced_pod("fill-0", namespace, grace_period_seconds=0)
    cluster.wait_for(
        "fill-0 gone from the API",
        lambda: not core.list_namespaced_pod(namespace, field_selector="metadata.name=fill-0").items,
        timeout=SCHEDULE_TIMEOUT,
    )
    assert judged()["NodeNames"] == [node]


def test_bind_refuses_a_pod_that_requests_no_gpu(core: Any, namespace: str) -> None:
    """Even from kube-scheduler's certificate: the extender binds only GPU pods."""
    body = cluster.pod_body("no-gpu", None, {"no-such-label": "x"})  # stays Pending
    created = core.create_namespaced_pod(namespace, body)
    args = {"PodName": "no-gpu", "PodNamespace": namespace, "PodUID": created.metadata.uid, "Node": "anywhere"}
    status, answer = cluster.extender_request("POST", "/bind", args)
    assert status == 200 and "requests no vgpu.io/gpu-memory" in json.loads(answer)["Error"], answer
    assert cluster.bound_node(core, namespace, "no-gpu") is None
