"""The scheduler extender's HTTP layer: kube-scheduler's POSTs in, the verbs' JSON answers out.

POST /<anything>/<verb> with a JSON body calls the verb (the last path segment, so /filter and
/<prefix>/filter both work); GET /healthz (alive), /readyz (API state synced), /metrics. A request
that is not what kube-scheduler sends is answered with a 4xx and {"Error": "<verb>: <what>"}.

The rule: nothing a peer sends can hold a thread, or more memory than the body cap, for long.
- One asyncio loop serves every connection, so an idle or half-open connection holds no thread.
  A request must arrive whole within REQUEST_TIMEOUT_S of its first byte (else 408, closed); a
  kept-alive connection may idle IDLE_TIMEOUT_S, longer than the 90 s after which Go's client
  (kube-scheduler) drops idle connections, so the client always closes first.
- A head is at most MAX_HEAD bytes in MAX_HEADERS lines; a body needs one ASCII Content-Length
  of at most MAX_BODY (413 before a byte of it is read); chunked bodies are refused (501).
  The bodies held at once (read, decoded, answered) total at most one cap, which bounds what
  decoding can take (bench/extender_limits.py: at most 137 MiB for a body at the cap).
- Verbs that wait on the API server (bind) run on WORKERS threads with at most QUEUED requests
  waiting for one; beyond that the answer is 503 at once. The other verbs are CPU only
  (milliseconds) and run on the loop itself, with no thread hand-off on the hot path; one that
  finds it must ask the API server after all (filter, before turning a pod away) answers Later,
  and the rest runs on those threads; one that waits on another process (bind, whose Binding the
  poster process posts) answers Awaiting, awaited on the loop.
- At most MAX_CONNECTIONS connections are open; the listen backlog is BACKLOG.
- With TLS (TlsFiles), a verb is answered only to a client whose certificate the client CA
  signed (kube-scheduler's); a certificate from another CA fails the handshake. GET /healthz,
  /readyz and /metrics need no certificate, so kubelet's HTTPS probes work. The handshake, too,
  must finish within REQUEST_TIMEOUT_S. Renewed certificate files are loaded without a restart.

MAX_BODY is sized from the largest cluster supported, 5000 nodes (docs/architecture.md says how).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import json
import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Protocol

import prometheus_client

from vgpu_components.tls import TlsFiles, TlsStream

log = logging.getLogger("vgpu.extender")

MAX_BODY = 5 * 1024 * 1024
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
REQUEST_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 120.0
WORKERS = 16
QUEUED = 64
HANDSHAKE_WORKERS = 4
MAX_CONNECTIONS = 512
BACKLOG = 1024
TLS_RELOAD_S = 60.0

# Fine below 10 ms, where filter and bind answer: bench/scheduling_throughput.py takes the p50 and
# p99 from these buckets.
_BUCKETS_MS = (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 5, 7.5, 10, 15, 25, 50, 100, 250, 500, 1000)
REQUESTS = prometheus_client.Histogram(
    "vgpu_extender_request_seconds",
    "Time to answer one extender request",
    ["verb"],
    buckets=tuple(ms / 1000 for ms in _BUCKETS_MS),
)
CONNECTIONS = prometheus_client.Counter(
    "vgpu_extender_connections", "Connections accepted (with TLS, each one cost a handshake)"
)
_CONTENT_LENGTH = re.compile(r"[0-9]{1,10}", re.ASCII)
# The answer to a request that ran out of time, by what it was waiting for.
_LATE = {
    "head": (408, "the request did not arrive in time"),
    "budget": (503, "too many large requests at once; retry"),
    "body": (408, "the request body did not arrive in time"),
}
_REASONS = {status.value: status.phrase for status in HTTPStatus}


@functools.cache
def _request_seconds(label: str) -> Any:
    """REQUESTS' child for a verb, looked up once (labels() takes a lock and builds a key)."""
    return REQUESTS.labels(label)


class BadRequest(ValueError):
    """A request body that is not what kube-scheduler sends; answered with 400."""


@dataclass(frozen=True)
class Later:
    """A verb's answer that must first ask the API server: `finish` runs on a worker thread, as a
    blocking verb does, and its result is the answer."""

    finish: Callable[[], Any]


@dataclass(frozen=True)
class Awaiting:
    """A verb's answer that waits on another process without holding a thread: `answer` is
    awaited on the server's loop, and its result is the answer (bind, with the poster process)."""

    answer: Coroutine[Any, Any, Any]


class _Reader(Protocol):
    """What a request is read with: asyncio's StreamReader, or tls.TlsStream."""

    async def readexactly(self, n: int, /) -> bytes: ...

    async def readuntil(self, separator: bytes = ..., /) -> bytes: ...


class _Writer(Protocol):
    """What an answer is written with: asyncio's StreamWriter, or tls.TlsStream."""

    def write(self, data: bytes, /) -> None: ...

    async def drain(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = ..., /) -> Any: ...

    def close(self) -> None: ...


class Verbs(Protocol):
    """What the server serves: verb name -> handler (decoded JSON in, JSON-ready object, encoded
    bytes or Later out), the verbs that wait on other servers, and the readiness check."""

    @property
    def verbs(self) -> Mapping[str, Callable[[Any], Any]]: ...

    @property
    def blocking(self) -> frozenset[str]: ...

    def ready(self) -> tuple[bool, str]: ...


class _Refusal(Exception):
    """A request answered with `status` and then closed, because its framing cannot be trusted."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Request:
    method: str
    path: str
    headers: dict[str, str]
    length: int
    keep_alive: bool


def _parse_head(head: bytes) -> _Request:
    lines = head.decode("latin-1").split("\r\n")[:-2]  # the head ends with an empty line
    if len(lines) > MAX_HEADERS + 1:
        raise _Refusal(431, f"more than {MAX_HEADERS} header lines")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[1].startswith("/"):
        raise _Refusal(400, f"malformed request line {lines[0][:100]!r}")
    method, path, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise _Refusal(505, f"HTTP version {version[:20]!r} is not supported; use HTTP/1.1")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or line[0] in " \t":
            raise _Refusal(400, f"malformed header line {line[:100]!r}")
        key, value = name.lower(), value.strip(" \t")
        if key in headers and headers[key] != value:
            if key in ("content-length", "transfer-encoding", "host"):
                raise _Refusal(400, f"conflicting {name} headers")
            value = f"{headers[key]}, {value}"
        headers[key] = value
    if "transfer-encoding" in headers:
        raise _Refusal(501, "Transfer-Encoding is not supported; send the body with a Content-Length")
    length = 0
    if "content-length" in headers:
        text = headers["content-length"]
        if not _CONTENT_LENGTH.fullmatch(text):
            raise _Refusal(400, f"Content-Length {text[:30]!r} is not a byte count")
        length = int(text)
        if length > MAX_BODY:
            raise _Refusal(
                413,
                f"request body of {length} bytes is over the {MAX_BODY}-byte limit (enough for the "
                "ExtenderArgs of a 5000-node cluster; configure the extender with nodeCacheCapable: true)",
            )
    elif method == "POST":
        raise _Refusal(411, "a POST needs a Content-Length")
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    return _Request(method, path.split("?", 1)[0], headers, length, keep_alive)


class _Budget:
    """Bytes of request bodies the server holds at once; a reader waits, in order, for its share.
    Only the loop's thread uses it."""

    def __init__(self, total: int) -> None:
        self.free = total
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, count: int) -> None:
        if not self._waiting and self.free >= count:
            self.free -= count
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (count, granted)
        self._waiting.append(entry)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self.give(count)  # granted just as the wait was cancelled
            else:
                self._waiting.remove(entry)
            raise

    def give(self, count: int) -> None:
        self.free += count
        while self._waiting and self._waiting[0][0] <= self.free:
            count, granted = self._waiting.popleft()
            self.free -= count
            granted.set_result(None)


class ExtenderServer:
    """Serves `app` on address:port (bound at construction, so port 0 gets a free port);
    serve_forever() runs until shutdown() from another thread."""

    def __init__(self, address: str, port: int, app: Verbs, *, tls: TlsFiles | None = None) -> None:
        self.app = app
        self.tls = tls
        self._context = tls.context() if tls is not None else None
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.socket = socket.create_server((address, port), family=family, backlog=BACKLOG)
        self.server_address = self.socket.getsockname()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._finished = threading.Event()
        self._connections = 0
        self._in_pool = 0
        self._pool: ThreadPoolExecutor | None = None
        self._handshakes: ThreadPoolExecutor | None = None
        self._budget: _Budget | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Serve until shutdown() (the component's main() calls it on SIGTERM or SIGINT)."""
        try:
            asyncio.run(self._main())
        finally:
            self._finished.set()

    def shutdown(self) -> None:
        if not self._started.wait(10) or self._loop is None or self._stop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has already ended
            self._loop.call_soon_threadsafe(self._stop.set)
        self._finished.wait(10)

    def server_close(self) -> None:
        self.socket.close()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._budget = _Budget(MAX_BODY)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="extender-worker")
        self._handshakes = ThreadPoolExecutor(HANDSHAKE_WORKERS, thread_name_prefix="extender-tls")
        server = await asyncio.start_server(self._connection, sock=self.socket, backlog=BACKLOG, limit=MAX_HEAD)
        reloader = asyncio.create_task(self._reload_tls()) if self.tls is not None else None
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            if reloader is not None:
                reloader.cancel()
            server.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._handshakes.shutdown(wait=False, cancel_futures=True)

    async def _reload_tls(self) -> None:
        """Load renewed certificate files into the serving context: new handshakes use them."""
        assert self.tls is not None and self._context is not None
        stamp = self.tls.stamp()
        while True:
            await asyncio.sleep(TLS_RELOAD_S)
            if self.tls.stamp() == stamp:
                continue
            try:
                self.tls.load(self._context)
                stamp = self.tls.stamp()
                log.info("loaded renewed TLS files (a CA that was replaced stays trusted until a restart)")
            except ValueError as exc:
                log.error("renewed TLS files are not usable; keeping the loaded ones: %s", exc)

    # --- connections ---------------------------------------------------------------------------
    async def _connection(self, raw_reader: asyncio.StreamReader, raw_writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_CONNECTIONS:
            raw_writer.transport.abort()
            return
        self._connections += 1
        CONNECTIONS.inc()
        sock = raw_writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader: _Reader = raw_reader
        writer: _Writer = raw_writer
        # Verbs need the client certificate kube-scheduler presents in the handshake (with TLS);
        # the connection's certificate does not change after it, so it is read once here.
        certified = self._context is None
        try:
            if self._context is not None:
                assert self._handshakes is not None
                stream = TlsStream(self._context, raw_reader, raw_writer, MAX_HEAD)
                writer = stream  # from here on, closing sends close_notify
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    await stream.handshake(self._handshakes)
                reader = stream
                certified = bool(stream.get_extra_info("peercert"))
            while await self._one_request(reader, writer, certified):
                pass
        except (ConnectionError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the peer went away or stalled while we wrote: nothing to answer
        except asyncio.CancelledError:
            pass  # the server is stopping
        finally:
            self._connections -= 1
            writer.close()

    async def _one_request(self, reader: _Reader, writer: _Writer, certified: bool) -> bool:
        """Serve one request; False when the connection is to be closed. `certified`: the client
        showed a certificate the client CA signed (always True without TLS)."""
        try:
            async with asyncio.timeout(IDLE_TIMEOUT_S):
                first = await reader.readexactly(1)
        except (asyncio.IncompleteReadError, TimeoutError):
            return False
        started = time.perf_counter()
        try:
            request, body = await self._receive(first, reader, writer)
        except _Refusal as refusal:
            await self._send(writer, refusal.status, {"Error": str(refusal)}, keep_alive=False)
            return False
        assert self._budget is not None
        try:
            status, payload, content_type, label = await self._dispatch(request, body, certified)
        finally:
            self._budget.give(request.length)
        await self._send(writer, status, payload, content_type, keep_alive=request.keep_alive)
        _request_seconds(label).observe(time.perf_counter() - started)
        return request.keep_alive

    async def _receive(self, first: bytes, reader: _Reader, writer: _Writer) -> tuple[_Request, bytes]:
        """The rest of a request whose first byte came: its head and body, within the request
        timeout and the body budget (taken here; the caller gives it back)."""
        assert self._budget is not None
        # One timer for the whole request (a timer per phase was a measurable part of the loop's
        # work per request); `phase` says which answer a timeout gets.
        phase, request, taken = "head", None, False
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                try:
                    request = _parse_head(first + await reader.readuntil(b"\r\n\r\n"))
                except asyncio.LimitOverrunError:
                    raise _Refusal(431, f"request head over {MAX_HEAD} bytes") from None
                phase = "budget"
                await self._budget.take(request.length)
                taken, phase = True, "body"
                if request.headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await reader.readexactly(request.length) if request.length else b""
        except TimeoutError:
            if taken:
                assert request is not None
                self._budget.give(request.length)
            raise _Refusal(*_LATE[phase]) from None
        except BaseException:
            if taken:
                assert request is not None
                self._budget.give(request.length)
            raise
        return request, body

    async def _dispatch(self, request: _Request, body: bytes, certified: bool) -> tuple[int, Any, str, str]:
        """(status, payload, content type, metric label) for one request."""
        path = request.path.rstrip("/")
        if request.method == "GET":
            return self._get(path)
        if request.method != "POST":
            return 405, {"Error": f"method {request.method[:20]!r} is not served; POST a verb"}, "", "unknown"
        if not certified:
            return 403, {"Error": "a verb needs a client certificate from extender.client_ca_file"}, "", "unknown"
        verb = path.rsplit("/", 1)[-1]
        handler = self.app.verbs.get(verb)
        if handler is None:
            expected = ", ".join(self.app.verbs)
            return 404, {"Error": f"unknown verb {verb[:60]!r}; expected one of {expected}"}, "", "unknown"
        if verb in self.app.blocking:
            status, payload = await self._in_worker(verb, functools.partial(_call, verb, handler, body))
        else:
            status, payload = _call(verb, handler, body)
            if isinstance(payload, Later):
                status, payload = await self._in_worker(verb, functools.partial(_finish, verb, payload.finish))
            elif isinstance(payload, Awaiting):
                status, payload = await _awaited(verb, payload.answer)
        return status, payload, "", verb

    async def _in_worker(self, verb: str, work: Callable[[], tuple[int, Any]]) -> tuple[int, Any]:
        """Run work that waits on the API server on a worker thread; 503 at once when too many wait."""
        if self._in_pool >= WORKERS + QUEUED:
            return 503, {"Error": f"{verb}: {self._in_pool} requests are waiting already; retry"}
        assert self._pool is not None
        self._in_pool += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, work)
        finally:
            self._in_pool -= 1

    def _get(self, path: str) -> tuple[int, Any, str, str]:
        if path.endswith("/healthz"):
            return 200, b"ok\n", "text/plain", "healthz"
        if path.endswith("/readyz"):
            ok, reason = self.app.ready()
            return (200 if ok else 503), (reason + "\n").encode(), "text/plain", "readyz"
        if path.endswith("/metrics"):
            return 200, prometheus_client.generate_latest(), prometheus_client.CONTENT_TYPE_LATEST, "metrics"
        return 404, b"not found\n", "text/plain", "unknown"

    @staticmethod
    async def _send(writer: _Writer, status: int, payload: Any, content_type: str = "", *, keep_alive: bool) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload, separators=(",", ":")).encode()
        head = [
            f"HTTP/1.1 {status} {_REASONS[status]}",
            f"Content-Type: {content_type or 'application/json'}",
            f"Content-Length: {len(data)}",
        ]
        if not keep_alive:
            head.append("Connection: close")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + data)
        async with asyncio.timeout(REQUEST_TIMEOUT_S):
            await writer.drain()


def _call(verb: str, handler: Callable[[Any], Any], body: bytes) -> tuple[int, Any]:
    """Decode the body, run the verb: (status, JSON-ready object, encoded bytes or Later)."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError) as exc:
        return 400, {"Error": f"{verb}: body is not JSON: {str(exc)[:200]}"}
    return _finish(verb, lambda: handler(decoded))


async def _awaited(verb: str, answer: Coroutine[Any, Any, Any]) -> tuple[int, Any]:
    """(status, payload) of an Awaiting answer, as _finish gives a Later's."""
    try:
        return 200, await answer
    except Exception as exc:
        log.exception("%s failed", verb)
        return 500, {"Error": f"{verb}: internal error: {exc}"}


def _finish(verb: str, answer: Callable[[], Any]) -> tuple[int, Any]:
    """(status, payload) of a verb's answer, or of why there is none."""
    try:
        return 200, answer()
    except BadRequest as exc:
        return 400, {"Error": f"{verb}: {exc}"}
    except Exception as exc:
        log.exception("%s failed", verb)
        return 500, {"Error": f"{verb}: internal error: {exc}"}
