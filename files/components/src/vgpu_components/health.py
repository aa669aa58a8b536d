"""A small HTTP server for /healthz (and extra GET routes such as /metrics) on a daemon thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A route returns (status, content type, body).
Route = Callable[[], tuple[int, str, bytes]]


class _Handler(BaseHTTPRequestHandler):
    server: HealthServer
    timeout = 10  # seconds a client may take to send its request: an idle peer cannot hold a thread

    def do_GET(self) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        if route is None:
            status, ctype, body = 404, "text/plain", b"not found\n"
        else:
            try:
                status, ctype, body = route()
            except Exception as exc:  # a failing check is an unhealthy answer, not a dead server
                status, ctype, body = 500, "text/plain", f"error: {exc}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds would flood the logs."""


class HealthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: str, port: int, routes: dict[str, Route]) -> None:
        self.routes = routes
        super().__init__((address, port), _Handler)
        self.thread = threading.Thread(target=self.serve_forever, name="healthz", daemon=True)

    def start(self) -> HealthServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def check(ok: Callable[[], tuple[bool, str]]) -> Route:
    """A route answering 200 when ok() is true, 503 otherwise, with ok()'s reason as the body."""

    def route() -> tuple[int, str, bytes]:
        healthy, reason = ok()
        return (200 if healthy else 503), "text/plain", (reason + "\n").encode()

    return route
