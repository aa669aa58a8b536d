"""The components' Kubernetes API calls, made through the official client against a small HTTP
server that plays the API server (records each request and answers like kube-apiserver).

A real kube-apiserver runs in tests/k8s; this checks the requests themselves (paths, verbs,
content types, bodies) where the unit tests otherwise replace the API layer.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest
from fakes import NODE, RecordingApiServer, kubeconfig_of
from kubernetes.client.rest import ApiException
from vgpu_components import kube
from vgpu_components.kube import Gone, KubeClusterApi


def test_extender_lists_watches_and_binds(apiserver: tuple[RecordingApiServer, Any]) -> None:
    server, api_client = apiserver
    api = KubeClusterApi(api_client)
    items, version = api.list("nodes")
    assert items == [NODE] and version == "5"
    server.watch_lines = [
        {"type": "MODIFIED", "object": NODE},
        {"type": "BOOKMARK", "object": {"kind": "Node", "metadata": {"resourceVersion": "9"}}},
    ]
    assert list(api.watch("nodes", "5")) == [(line["type"], line["object"]) for line in server.watch_lines]
    method, path, _ctype, _body = server.requests[-1]
    assert method == "GET" and "watch=true" in path and "resourceVersion=5" in path
    assert "allowWatchBookmarks=true" in path
    api.bind("default", "p", "uid-1", "gpu-a", {"vgpu.io/gpu-index": "1"})
    method, path, _ctype, body = server.requests[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/pods/p/binding")
    assert body["metadata"] == {
        "name": "p",
        "namespace": "default",
        "uid": "uid-1",
        "annotations": {"vgpu.io/gpu-index": "1"},
    }
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-a"}
    assert api.get_pod("default", "p")["metadata"]["name"] == "p"


def test_binds_reuse_one_connection(apiserver: tuple[RecordingApiServer, Any]) -> None:
    """Each bind used to leave its answer unread, so every bind opened a new connection (a TLS
    handshake against a real API server)."""
    server, api_client = apiserver
    api = KubeClusterApi(api_client)
    for i in range(5):
        api.bind("default", f"p{i}", f"uid-{i}", "gpu-a", {})
    assert len(server.requests) == 5 and len(server.clients) == 1


def test_a_refused_bind_raises_with_the_api_servers_answer(apiserver: tuple[RecordingApiServer, Any]) -> None:
    """The extender releases the GPU it reserved only when the bind raises: a Binding the API
    server refuses (409: the pod is bound already) must raise with its status, and leave the
    connection usable for the next bind."""
    server, api_client = apiserver
    api = KubeClusterApi(api_client)
    server.binding_status = 409
    with pytest.raises(ApiException) as refused:
        api.bind("default", "p", "uid-1", "gpu-a", {})
    assert refused.value.status == 409 and "Failure" in str(refused.value.body)
    server.binding_status = 201
    api.bind("default", "p", "uid-1", "gpu-a", {})
    assert len(server.clients) == 1


def test_an_expired_watch_means_list_again(apiserver: tuple[RecordingApiServer, Any]) -> None:
    server, api_client = apiserver
    server.watch_lines = [
        {
            "type": "ERROR",
            "object": {
                "kind": "Status",
                "code": 410,
                "reason": "Expired",
                "message": "too old resource version: 1 (5)",
            },
        }
    ]
    with pytest.raises(Gone):
        list(KubeClusterApi(api_client).watch("pods", "1"))


def test_device_plugin_patches_its_node_and_posts_events(apiserver: tuple[RecordingApiServer, Any]) -> None:
    server, api_client = apiserver
    api = kube.KubeNodeApi(api_client, "nvidia-shared-device-plugin")
    api.annotate_node("gpu-a", {"vgpu.io/gpus": '{"unit_mib": 100, "gpus": []}'})
    assert server.requests[-1] == (
        "PATCH",
        "/api/v1/nodes/gpu-a",
        "application/merge-patch+json",
        {"metadata": {"annotations": {"vgpu.io/gpus": '{"unit_mib": 100, "gpus": []}'}}},
    )
    api.node_event("gpu-a", "GPUMemoryNotAdvertised", "unit too small")
    method, path, _ctype, body = server.requests[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/events")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-a", "uid": "gpu-a"}
    assert (body["reason"], body["type"], body["message"]) == ("GPUMemoryNotAdvertised", "Warning", "unit too small")


def test_a_client_keeps_a_connection_for_each_thread_that_calls_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The extender's poster posts Bindings on 16 threads through one client, whose pool keeps 5
    connections per CPU: on a 2-core node 10, so after each burst of binds it dropped the rest,
    and each new connection was one more TLS handshake for kube-apiserver (455 "Connection pool
    is full" warnings in one 2-core bench run). Sized to its threads, a second burst reuses the
    first one's connections."""
    monkeypatch.setattr(multiprocessing, "cpu_count", lambda: 2)  # the client's default: 10
    server = RecordingApiServer()
    server.binding_delay_s = 0.3  # the burst's binds overlap
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = KubeClusterApi(kube.api_client(str(kubeconfig_of(server, tmp_path / "kubeconfig")), connections=16))

        def burst(tag: str) -> None:
            threads = [
                threading.Thread(target=api.bind, args=("default", f"{tag}{i}", f"uid-{tag}{i}", "gpu-a", {}))
                for i in range(16)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)

        burst("a")
        opened = len(server.clients)
        burst("b")
        assert len(server.clients) == opened, f"{len(server.clients) - opened} new connections for the second burst"
    finally:
        server.shutdown()
        server.server_close()
