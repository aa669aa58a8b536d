"""A plain-HTTP proxy on loopback to the e2e API server, for tests that must act between two
requests of a client they do not control (an Ansible module): `before(method, path, headers)` runs
before each request is passed on, with the proxy's admin credentials doing the passing."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.k8s import cluster

Hook = Callable[[str, str, Mapping[str, str]], None]
# Headers that belong to one connection, not to the request or response passed on.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def handler(api: Any, before: Hook) -> type[BaseHTTPRequestHandler]:
    host = api.configuration.host

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers.pop("Authorization", None)  # the proxy's own credentials are the admin's
            before(self.command, self.path, headers)
            response = api.rest_client.pool_manager.request(
                self.command, host + self.path, body=body or None, headers=headers, preload_content=True
            )
            self.send_response(response.status)
            for key, value in response.headers.items():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(response.data)))
            self.end_headers()
            self.wfile.write(response.data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Forward


@contextmanager
def proxy(kubeconfig: Path, before: Hook) -> Iterator[Path]:
    """Serve the proxy while the block runs; yields `kubeconfig`, written to reach the API through it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler(cluster.api_client(), before))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cluster.write_kubeconfig(kubeconfig, {"server": f"http://127.0.0.1:{server.server_port}"}, {})
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()
