"""The scheduler extender's HTTP layer: kube-scheduler's POSTs in, the verbs' JSON answers out.

POST /<anything>/<verb> with a JSON body calls the verb (the last path segment, so /filter and
/<prefix>/filter both work); GET /healthz (alive), /readyz (API state synced), /metrics. A body
that is not what kube-scheduler sends is answered with 400 and {"Error": "<verb>: <what>"}; the
server never dies of a request.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

import prometheus_client

log = logging.getLogger("vgpu.extender")
MAX_BODY = 64 * 1024 * 1024

REQUESTS = prometheus_client.Histogram(
    "vgpu_extender_request_seconds",
    "Time to answer one extender request",
    ["verb"],
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
)


class BadRequest(ValueError):
    """A request body that is not what kube-scheduler sends; answered with 400."""


class Verbs(Protocol):
    """What the server serves: verb name -> handler (decoded JSON in, JSON-ready object or
    encoded bytes out), and the readiness check."""

    @property
    def verbs(self) -> Mapping[str, Callable[[Any], Any]]: ...

    def ready(self) -> tuple[bool, str]: ...


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
        handler = self.server.app.verbs.get(verb)
        started = time.perf_counter()
        try:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                raise BadRequest(f"request body of {length} bytes is over the {MAX_BODY}-byte limit")
            raw = self.rfile.read(length)
            if handler is None:
                expected = ", ".join(self.server.app.verbs)
                self._send(404, {"Error": f"unknown verb {verb!r}; expected one of {expected}"})
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
        if path.endswith("/healthz"):
            self._send(200, b"ok\n", "text/plain")
        elif path.endswith("/readyz"):
            ok, reason = self.server.app.ready()
            self._send(200 if ok else 503, (reason + "\n").encode(), "text/plain")
        elif path.endswith("/metrics"):
            self._send(200, prometheus_client.generate_latest(), prometheus_client.CONTENT_TYPE_LATEST)
        else:
            self._send(404, b"not found\n", "text/plain")

    def log_message(self, format: str, *args: object) -> None:
        """kube-scheduler calls several times per pod; decisions are logged elsewhere."""


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: str, port: int, app: Verbs) -> None:
        self.app = app
        super().__init__((address, port), _Handler)
