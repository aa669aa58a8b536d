"""The extender's Bindings posted by a process of its own (issue 42; docs/architecture.md, "the
Bindings posted by a second process").

The extender is one Python process: kube-scheduler's filter, its binds, the watches and the TLS
records share one interpreter lock, and on a 16-core host that lock is what limits the pods placed
a second (kube-scheduler calls filter once per pod on its one scheduling loop). A bind's Binding
POST to the API server through the Kubernetes client, and the worker thread it waited on, were a
large part of that lock's time. Here the extender still answers bind on its event loop: it
reserves the pod's GPU in its model (under the model's lock, as before) and sends the Binding to
a second process, the poster, over a socketpair, awaiting its answer without a thread; the
poster posts it with its own client and interpreter lock, and says how it went.

The protocol, one JSON document a line each way, answers in any order:
  {"id": n, "bind": [namespace, name, uid, node, annotations], "placed": {gpu_index, gpu_uuid,
  units, cores}}  ->  {"id": n, "error": ""}
("" bound; else why not, and the extender releases the reservation). The poster writes the
operator's line for each bound pod (log_bound), from "placed". The extender starts the
poster (python -m vgpu_components.extender_poster), starts it again when it exits, and posts
in-process, on a worker thread as before, while none runs. On a second socketpair (--watch-fd)
the poster also sends the pods' records the extender's model follows (extender_pods.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from vgpu_components import component, kube
from vgpu_components.extender_pods import PodFeed, send_records

log = logging.getLogger("vgpu.extender")

WORKERS = 16  # Bindings in flight at once in the poster, as the extender's bind workers
POST_TIMEOUT_S = 15.0  # the poster's API call times out after 10 s: an answer comes before this
RESTART_BACKOFF_S = (1.0, 30.0)  # the wait before a restart doubles from the first to the second
STEADY_S = 60.0  # a poster that ran this long starts the back-off over

COMPONENT = component.Component(
    "gpushare-scheduler-extender-poster",
    "posts the scheduler extender's Bindings for it; started by gpushare-scheduler-extender, not by hand",
    kubeconfig_help="kubeconfig file (default: in-cluster config, then ~/.kube/config)",
)


# --- the extender's side ------------------------------------------------------------------------
@dataclass
class _Connection:
    writer: asyncio.StreamWriter
    generation: int
    pending: dict[int, asyncio.Future[str]] = field(default_factory=dict)
    closed: bool = False


class Poster:
    """The extender's end: post() sends a Binding to the running poster process and awaits its
    answer, on the extender's event loop. attach() (from the supervising thread) hands it the
    socket of each new poster process."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._generation = 0
        self._connection: _Connection | None = None
        self._connecting: asyncio.Lock | None = None
        self._ids = itertools.count(1)

    def attach(self, sock: socket.socket | None) -> None:
        self._sock = sock
        self._generation += 1

    @property
    def attached(self) -> bool:
        return self._sock is not None

    async def post(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str], *, placed: Mapping[str, Any]
    ) -> str:
        """ "" when the API server bound the pod (the poster has logged it, with `placed`); else
        why not. ConnectionError when no poster answered (it is not running, or exited before
        answering)."""
        connection = await self._connect()
        ident = next(self._ids)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        connection.pending[ident] = future
        try:
            message = {"id": ident, "bind": [namespace, name, uid, node, annotations], "placed": placed}
            connection.writer.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            async with asyncio.timeout(POST_TIMEOUT_S):
                await connection.writer.drain()
                return await future
        except TimeoutError:
            raise ConnectionError(f"the poster process did not answer within {POST_TIMEOUT_S:g} s") from None
        finally:
            connection.pending.pop(ident, None)

    async def _connect(self) -> _Connection:
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            current = self._connection
            if current is not None and not current.closed and current.generation == self._generation:
                return current
            sock, generation = self._sock, self._generation
            if sock is None:
                raise ConnectionError("no poster process is running")
            reader, writer = await asyncio.open_unix_connection(sock=sock)
            connection = self._connection = _Connection(writer, generation)
            asyncio.get_running_loop().create_task(self._read(reader, connection))
            return connection

    @staticmethod
    async def _read(reader: asyncio.StreamReader, connection: _Connection) -> None:
        try:
            while line := await reader.readline():
                answer = json.loads(line)
                future = connection.pending.get(int(answer["id"]))
                if future is not None and not future.done():
                    future.set_result(str(answer.get("error") or ""))
        except (ConnectionError, ValueError, KeyError) as exc:
            log.error("the poster process's answers cannot be read: %s", exc)
        finally:
            connection.closed = True
            for future in connection.pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("the poster process exited before it answered"))
            connection.writer.close()


class PosterProcess:
    """The poster process, kept running by the extender (a Part of its serve): started again when it
    exits, after a wait that doubles while it keeps exiting (RESTART_BACKOFF_S); terminated at stop.
    With a feed it also watches the pods for the extender (extender_pods.py): the feed takes its
    records while it runs and watches from the extender while it does not."""

    def __init__(self, poster: Poster, command: list[str], stop: threading.Event, feed: PodFeed | None = None) -> None:
        self.poster = poster
        self.feed = feed
        self.command = command
        self.stopping = stop
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.thread = threading.Thread(target=self._run, name="poster-process", daemon=True)

    def start(self) -> PosterProcess:
        self.thread.start()
        return self

    def _run(self) -> None:
        backoff = RESTART_BACKOFF_S[0]
        while not self.stopping.is_set():
            started = time.monotonic()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            records, watch = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) if self.feed else (None, None)
            command, fds = [*self.command, "--socket-fd", str(theirs.fileno())], [theirs.fileno()]
            if watch is not None:
                command += ["--watch-fd", str(watch.fileno())]
                fds.append(watch.fileno())
            with theirs:
                process = subprocess.Popen(command, pass_fds=fds, stdin=subprocess.DEVNULL)
            if watch is not None:
                watch.close()
            self.process = process
            self.starts += 1
            self.poster.attach(ours)
            if self.feed is not None and records is not None:
                self.feed.from_poster(records)
            process.wait()
            self.poster.attach(None)
            if self.feed is not None and not self.stopping.is_set():
                self.feed.watch_here()
            if self.stopping.is_set():
                return
            if time.monotonic() - started >= STEADY_S:
                backoff = RESTART_BACKOFF_S[0]
            log.error(
                "the poster process exited (code %s); posting in-process until it is back (in %g s)",
                process.returncode,
                backoff,
            )
            self.stopping.wait(backoff)
            backoff = min(2 * backoff, RESTART_BACKOFF_S[1])

    def stop(self) -> None:
        self.stopping.set()
        process = self.process
        if process is not None and process.poll() is None:
            component.terminate(process, 10)
        self.thread.join(10)


def command(args: argparse.Namespace) -> list[str]:
    """The poster's command line, from the extender's own arguments."""
    line = [sys.executable, "-m", "vgpu_components.extender_poster", "--config", args.config]
    if getattr(args, "kubeconfig", None):
        line += ["--kubeconfig", args.kubeconfig]
    return line


def log_bound(namespace: str, name: str, node: str, placed: Mapping[str, Any]) -> None:
    """The operator's line for a pod the extender placed, written by the process that posted its
    Binding once the API server bound it (the poster; the extender while none runs)."""
    log.info(
        "bound %s/%s to %s GPU %d",
        namespace,
        name,
        node,
        placed["gpu_index"],
        extra={"gpu_uuid": placed["gpu_uuid"], "units": placed["units"], "cores": placed["cores"]},
    )


# --- the poster process -------------------------------------------------------------------------
def serve(sock: socket.socket, api: kube.ClusterApi, stop: threading.Event) -> None:
    """Post each Binding that comes on `sock` on one of WORKERS threads, and answer it, until the
    extender's end closes (or `stop`)."""
    lock = threading.Lock()

    def post(ident: int, binding: list, placed: Mapping[str, Any] | None) -> None:
        namespace, name, uid, node, annotations = binding
        try:
            api.bind(namespace, name, uid, node, annotations)
            error = ""
            if placed:
                log_bound(namespace, name, node, placed)
        except Exception as exc:
            log.exception("bind of %s/%s to %s failed", namespace, name, node)
            error = str(exc) or type(exc).__name__
        line = json.dumps({"id": ident, "error": error}, separators=(",", ":")).encode() + b"\n"
        with lock, contextlib.suppress(OSError):  # the extender is gone: nothing to tell
            sock.sendall(line)

    with ThreadPoolExecutor(WORKERS, thread_name_prefix="poster") as pool, sock.makefile("rb") as lines:
        for line in lines:
            if stop.is_set():
                break
            message = json.loads(line)
            pool.submit(post, int(message["id"]), list(message["bind"]), message.get("placed"))


def run(started: component.Started, socket_fd: int, watch_fd: int | None) -> int:
    sock = socket.socket(fileno=socket_fd)
    # One connection each for the posting threads and the pod watch.
    client = kube.api_client(started.args.kubeconfig, connections=WORKERS + 1)
    api = kube.KubeClusterApi(client, component.node_name())
    parent = os.getppid()
    if watch_fd is not None:  # the pods' records for the extender (extender_pods.py)
        watch = socket.socket(fileno=watch_fd)
        prefix = started.cfg["resource_prefix"]
        threading.Thread(
            target=send_records, args=(api, prefix, watch, started.stop), name="sync-pods", daemon=True
        ).start()

    def serving() -> None:
        serve(sock, api, started.stop)
        started.stop.set()  # the extender's end closed

    def orphaned() -> None:  # the extender was killed: so is this process's purpose
        while not started.stop.wait(1.0):
            if os.getppid() != parent:
                started.stop.set()

    log.info("posting the extender's Bindings (pid %d, for the extender's pid %d)", os.getpid(), parent)
    threading.Thread(target=serving, name="serving", daemon=True).start()
    threading.Thread(target=orphaned, name="orphaned", daemon=True).start()
    started.wait()  # a stop signal (the extender's terminate) ends it at once
    return component.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--watch-fd", type=int)
    known, rest = parser.parse_known_args(argv)
    return component.main(COMPONENT, lambda started: run(started, known.socket_fd, known.watch_fd), rest)


if __name__ == "__main__":
    sys.exit(main())
