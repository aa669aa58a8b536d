"""The components' Kubernetes API calls, made through the official client against a small HTTP
server that plays the API server (records each request and answers like kube-apiserver).

A real kube-apiserver runs in tests/k8s; this checks the requests themselves (paths, verbs,
content types, bodies) where the unit tests otherwise replace the API layer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s
from vgpu_components import kube
from vgpu_components.kube import Gone, KubeClusterApi

NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "resourceVersion": "7"}}


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.clients: set[tuple[str, int]] = set()  # client addresses: one per TCP connection
        self.watch_lines: list[dict[str, Any]] = []
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: ApiServer
    protocol_version = "HTTP/1.1"  # keep-alive, as kube-apiserver

    def _reply(self, status: int, body: Any, lines: list[dict[str, Any]] | None = None) -> None:
        data = (
            b"".join(json.dumps(x).encode() + b"\n" for x in lines) if lines is not None else json.dumps(body).encode()
        )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.requests.append((self.command, self.path, self.headers.get("Content-Type", ""), body))
        self.server.clients.add(self.client_address)
        return body

    def do_GET(self) -> None:
        self._record()
        if "watch=true" in self.path:
            self._reply(200, None, lines=self.server.watch_lines)
        elif self.path.startswith("/api/v1/nodes"):
            self._reply(
                200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "5"}, "items": [NODE]}
            )
        else:
            self._reply(
                200,
                {
                    "kind": "Pod",
                    "apiVersion": "v1",
                    "metadata": {"name": "p", "namespace": "default"},
                    "spec": {"containers": []},
                },
            )

    def do_PATCH(self) -> None:
        self._record()
        self._reply(200, {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}})

    def do_POST(self) -> None:
        body = self._record()
        if self.path.endswith("/binding"):
            self._reply(201, {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201})
        else:
            self._reply(201, body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet test output."""


@pytest.fixture
def apiserver() -> Iterator[tuple[ApiServer, Any]]:
    server = ApiServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield server, k8s.ApiClient(configuration)
    server.shutdown()
    server.server_close()


def test_extender_lists_watches_annotates_and_binds(apiserver: tuple[ApiServer, Any]) -> None:
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
    api.annotate_pod("default", "p", {"vgpu.io/gpu-uuid": "GPU-1"})
    assert server.requests[-1] == (
        "PATCH",
        "/api/v1/namespaces/default/pods/p",
        "application/merge-patch+json",
        {"metadata": {"annotations": {"vgpu.io/gpu-uuid": "GPU-1"}}},
    )
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


def test_binds_reuse_one_connection(apiserver: tuple[ApiServer, Any]) -> None:
    """Each bind used to leave its answer unread, so every bind opened a new connection (a TLS
    handshake against a real API server)."""
    server, api_client = apiserver
    api = KubeClusterApi(api_client)
    for i in range(5):
        api.bind("default", f"p{i}", f"uid-{i}", "gpu-a", {})
    assert len(server.requests) == 5 and len(server.clients) == 1


def test_an_expired_watch_means_list_again(apiserver: tuple[ApiServer, Any]) -> None:
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


def test_device_plugin_patches_its_node_and_posts_events(apiserver: tuple[ApiServer, Any]) -> None:
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
