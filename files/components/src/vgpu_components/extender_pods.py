"""The extender's pods, from one source at a time (issue 42; docs/architecture.md, "the pod watch
in the poster").

Every pod event costs the process that watches: the TLS records and chunks of the watch, a pod's
JSON (kilobytes), the model's update. In the extender that work holds the interpreter lock that
kube-scheduler's filter calls wait on, for four or five events per pod, most of them status
updates that change nothing the model counts. So while a poster process runs (extender_poster.py)
it watches the pods and sends the extender, over a socket of its own, each GPU pod's record
(scheduling.pod_record) only when it changed, one JSON document a line:

  {"pods": [record, ...]}   its full list (at its start, and each relist): replaces the pods
  {"pod": record}           a pod added or changed
  {"gone": uid}             a pod deleted

While none runs (at start-up, and while a poster that exited is restarted) the extender watches
the pods itself (kube.Informer), as it did before. A switch of source makes the new one list in
full; what the old one still says after the switch is dropped, so the model never takes a stale
source's event after the new source's list.
"""

from __future__ import annotations

import gc
import json
import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from vgpu_components import kube
from vgpu_components.scheduling import ClusterModel, PodRecord, pod_record

log = logging.getLogger("vgpu.extender")


def freeze() -> None:
    """After a full list: the model is long-lived, so it is kept out of the collector's full
    passes, which would otherwise walk every node and pod during requests."""
    gc.collect()
    gc.freeze()


# --- the poster's side --------------------------------------------------------------------------
class Changes:
    """In the poster process: the messages for the extender that a pod watch's lists and events
    make, each GPU pod's record only when it changed (a status update that changes nothing
    counted makes none; a pod without GPU memory is none of the extender's: units never change)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.sent: dict[str, PodRecord] = {}

    def listed(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        records = [record for item in items if (record := pod_record(item, self.prefix)).units]
        self.sent = {record.uid: record for record in records}
        return {"pods": records}

    def event(self, kind: str, obj: dict[str, Any]) -> dict[str, Any] | None:
        if kind == "DELETED":
            uid = str(obj.get("metadata", {}).get("uid", ""))
            return {"gone": uid} if self.sent.pop(uid, None) is not None else None
        record = pod_record(obj, self.prefix)
        if not record.units or self.sent.get(record.uid) == record:
            return None
        self.sent[record.uid] = record
        return {"pod": record}


def send_records(api: kube.ListWatchApi, prefix: str, sock: socket.socket, stop: threading.Event) -> None:
    """In the poster process: watch the pods and send the extender their Changes, until `stop` or
    the extender's end closes."""
    changes = Changes(prefix)

    def send(message: dict[str, Any] | None) -> None:
        if message is None:
            return
        try:
            sock.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        except OSError:
            stop.set()  # the extender is gone

    kube.Informer(
        api, "pods", lambda items: send(changes.listed(items)), lambda *event: send(changes.event(*event))
    ).run(stop)


# --- the extender's side ------------------------------------------------------------------------
class PodFeed:
    """Keeps the model's pods in step from the poster's records or the extender's own watch."""

    def __init__(self, model: ClusterModel, api: kube.ListWatchApi) -> None:
        self.model = model
        self.api = api
        self.lock = threading.Lock()
        self.source = 0  # the current source; what an older one says is dropped
        self.synced = False  # a first full list has been taken in (it stays so across switches)
        self.local: threading.Event | None = None  # stops the extender's own watch
        self.records = 0  # records taken in from the poster (a test and the bench read it)

    # --- switching (from the poster's supervising thread, and at start and stop) ---------------
    def watch_here(self) -> None:
        """No poster runs: the extender's own watch, from a full list."""
        with self.lock:
            token = self._switch()
            stop = self.local = threading.Event()
        informer = kube.Informer(
            self.api,
            "pods",
            lambda items: self._apply(token, lambda: self.model.replace_all(None, items), listed=True),
            lambda kind, obj: self._apply(token, lambda: self.event(kind, obj)),
        )
        threading.Thread(target=informer.run, args=(stop,), name="sync-pods", daemon=True).start()

    def from_poster(self, sock: socket.socket) -> None:
        """A poster runs: its records from `sock` until it exits (watch_here() then)."""
        with self.lock:
            token = self._switch()
        threading.Thread(target=self._read, args=(sock, token), name="sync-pods-poster", daemon=True).start()

    def stop(self) -> None:
        with self.lock:
            self._switch()

    def _switch(self) -> int:
        if self.local is not None:
            self.local.set()
            self.local = None
        self.source += 1
        return self.source

    # --- the sources ---------------------------------------------------------------------------
    def _apply(self, token: int, change: Callable[[], None], *, listed: bool = False) -> None:
        with self.lock:
            if token != self.source:
                return  # a source switched away from
            change()
            if listed:
                self.synced = True
        if listed:
            freeze()

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        """One event of the extender's own watch."""
        if kind == "DELETED":
            self.model.remove_pod(str(obj.get("metadata", {}).get("uid", "")))
        else:
            self.model.set_pod(obj)

    def _read(self, sock: socket.socket, token: int) -> None:
        """The poster's records until it exits (its supervisor then switches), or until one cannot
        be read: the poster still runs then, so the extender watches the pods itself."""
        try:
            with sock, sock.makefile("rb") as lines:
                for line in lines:
                    self.take(line, token)
        except (OSError, ValueError, TypeError) as exc:
            with self.lock:
                current = token == self.source
            if current:
                log.error("the poster's pod records cannot be read (%s); watching the pods here", exc)
                self.watch_here()

    def take(self, line: bytes, token: int) -> None:
        """One line of the poster's, from the source `token` (dropped when that is not current)."""
        message = json.loads(line)
        self._apply(token, self._change(message), listed="pods" in message)

    def _change(self, message: dict[str, Any]) -> Callable[[], None]:
        model = self.model
        if "pod" in message:
            record = PodRecord(*message["pod"])
            self.records += 1
            return lambda: model.set_record(record)
        if "gone" in message:
            uid = str(message["gone"])
            self.records += 1
            return lambda: model.remove_pod(uid)
        records = [PodRecord(*item) for item in message["pods"]]
        self.records += len(records)
        return lambda: model.replace_records(records)
