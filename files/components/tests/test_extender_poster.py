"""The extender's Bindings posted by a second process (extender_poster.py, issue 42): the real
poster process (python -m vgpu_components.extender_poster) started by PosterProcess, posting to
RecordingApiServer over real HTTP, and the extender answering bind over real HTTP on its loop.

No kube-apiserver in unit tests: RecordingApiServer plays it for the poster, FakeClusterApi for
the extender's own reads (tests/k8s runs the whole extender, poster included, against the real
kube-apiserver and kube-scheduler)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import GPU0, GPU1, FakeClusterApi, RecordingApiServer, Scheduler, kubeconfig_of, node_obj, pod_obj
from vgpu_components.extender_http import ExtenderServer
from vgpu_components.extender_poster import Poster, PosterProcess
from vgpu_components.extender_verbs import Extender
from vgpu_components.scheduling import ClusterModel

from tests.polling import wait_for

POSTER_STARTED = "posting the extender's Bindings"  # its log line once its signal handlers are set


class Posting:
    """The extender with a poster process, the API server the poster posts to, and kube-scheduler.
    With `pods` the poster also watches the pods (the API server lists those and streams
    `apiserver.pod_events`), and the extender's pods come from it while it runs (extender_pods.py)."""

    def __init__(self, folder: Path, pods: list[dict[str, Any]] | None = None) -> None:
        self.threads = set(threading.enumerate())  # those of earlier tests
        self.apiserver = RecordingApiServer()
        if pods is not None:
            self.apiserver.pods = pods
            self.apiserver.pod_events = queue.Queue()
        threading.Thread(target=self.apiserver.serve_forever, daemon=True).start()
        kubeconfig = kubeconfig_of(self.apiserver, folder / "kubeconfig", {"token": "t"})
        config = folder / "config.yaml"
        config.write_text("log_format: text\n")
        self.api = FakeClusterApi()
        model = ClusterModel("vgpu.io")
        model.set_node(node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 0)]))
        self.poster = Poster()
        self.extender = Extender(model, self.api, self.poster)
        self.http = ExtenderServer("127.0.0.1", 0, self.extender)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.scheduler = Scheduler(self.http.server_address[1], self.api, self.extender)
        # The poster's stderr (its log) into a file the tests read; exec keeps its PID the one
        # PosterProcess watches and signals.
        self.log = folder / "poster.log"
        command = ["sh", "-c", 'exec "$@" 2>>"$0"', str(self.log)]
        command += [sys.executable, "-m", "vgpu_components.extender_poster", "--config", str(config)]
        feed = self.extender.pods if pods is not None else None
        if feed is not None:
            feed.watch_here()  # as start_background does, before the poster runs
        command += ["--kubeconfig", str(kubeconfig)]
        self.process = PosterProcess(self.poster, command, threading.Event(), feed)
        self.process.start()
        wait_for("the poster process attached", lambda: self.poster.attached, timeout=60)
        # Started, not just spawned: kube-scheduler's client gives a bind 5 s, and on a loaded
        # machine the poster's imports alone can take longer.
        wait_for("the poster's start line", lambda: self.logged(POSTER_STARTED), timeout=120)

    def logged(self, text: str, times: int = 1) -> bool:
        """Have the poster processes written `text` to their log `times` times (the file exists
        once the first one's shell has run)?"""
        return self.log.exists() and self.log.read_text().count(text) >= times

    def bindings(self) -> list[tuple[str, Any]]:
        """(path, body) of each Binding the API server was sent (by the poster)."""
        return [(path, body) for method, path, _type, body in self.apiserver.requests if path.endswith("/binding")]

    def bind(self, name: str, *, watched: bool = True) -> dict[str, Any]:
        pod = pod_obj(name, 8000)
        self.api.pods[("default", name)] = pod
        if watched:
            self.extender.model.set_pod(pod)  # the extender's pod watch saw it created, pending
        status, answer = self.scheduler.post("/filter-tightest", {"Pod": pod, "NodeNames": ["gpu-a"]})
        assert status == 200 and answer["NodeNames"] == ["gpu-a"], answer
        status, answer = self.scheduler.post(
            "/bind", {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-{name}", "Node": "gpu-a"}
        )
        assert status == 200, answer
        return dict(answer)

    def close(self) -> None:
        if self.apiserver.pod_events is not None:
            self.apiserver.pod_events.put(None)  # ends the poster's watch
        self.process.stop()
        if self.extender.pods is not None:
            self.extender.pods.stop()
            self.api.events["pods"].put(None)  # wakes the extender's own watch, which then ends
        self.http.shutdown()
        self.http.server_close()
        self.apiserver.shutdown()
        self.apiserver.server_close()


@pytest.fixture
def posting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Posting]:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))  # the poster imports vgpu_components
    p = Posting(tmp_path)
    yield p
    p.close()


def running(name: str, gpu: str) -> dict[str, Any]:
    """A pod of 6000 MiB bound to gpu-a's `gpu` by the extender, running."""
    pod = pod_obj(name, 6000)
    pod["spec"]["nodeName"] = "gpu-a"
    pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": gpu, "vgpu.io/gpu-index": "0" if gpu == GPU0 else "1"}
    pod["status"]["phase"] = "Running"
    return pod


@pytest.fixture
def feeding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Posting]:
    """The extender whose poster watches the pods too; the API server lists one running pod."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    p = Posting(tmp_path, pods=[running("listed", GPU0)])
    yield p
    p.close()


def free(posting: Posting) -> list[int]:
    return [gpu.free for gpu in posting.extender.model.nodes["gpu-a"].gpus]


def shows(posting: Posting, what: str, units_free: list[int]) -> None:
    """Wait until gpu-a's GPUs have `units_free` units free in the extender's model."""
    wait_for(what, lambda: free(posting) == units_free, timeout=60, seen=lambda: free(posting))


def own_watch_ended(posting: Posting) -> bool:
    """The extender's own pod watch took every event put for it, and its thread has ended."""
    mine = [t for t in threading.enumerate() if t.name == "sync-pods" and t not in posting.threads]
    return posting.api.events["pods"].empty() and not mine


def test_the_poster_watches_the_pods_and_sends_a_pods_record_only_when_it_changed(feeding: Posting) -> None:
    """The poster lists and watches the pods and sends the extender each GPU pod's record; status
    updates that change nothing counted, and pods without GPU memory, are not sent at all (in the
    extender they cost a pod's JSON each under its interpreter lock)."""
    feed = feeding.extender.pods
    assert feed is not None
    shows(feeding, "the poster's list in the model", [62, 122])
    assert feed.synced
    listed = feed.records
    events = feeding.apiserver.pod_events
    assert events is not None
    pod = running("listed", GPU0)
    for condition in ("Initialized", "Ready", "ContainersReady"):  # kubelet's status updates
        pod["status"]["conditions"] = [{"type": condition, "status": "True"}]
        events.put({"type": "MODIFIED", "object": pod})
    events.put({"type": "ADDED", "object": pod_obj("cpu-only", None)})
    events.put({"type": "ADDED", "object": running("second", GPU1)})
    shows(feeding, "the second pod counted", [62, 62])
    events.put({"type": "DELETED", "object": pod})
    shows(feeding, "the deleted pod's memory free", [122, 62])
    assert feed.records == listed + 2  # the second pod, the deletion
    assert feeding.api.lists["pods"] <= 1  # the extender's own watch listed at most once, before the poster ran


def test_while_no_poster_runs_the_extender_watches_the_pods_itself_and_a_stale_source_is_dropped(
    feeding: Posting,
) -> None:
    """Once the poster's records come, what the extender's own watch still says is dropped; a
    killed poster's records stop and the extender lists and watches the pods itself until the
    poster is back, whose list then replaces what the extender's own watch said. (The extender's
    watches here share one event queue, FakeClusterApi's: an event put for them wakes the oldest.)"""
    shows(feeding, "the poster's list in the model", [62, 122])
    local = feeding.api  # the extender's own API (FakeClusterApi), not the poster's
    local.events["pods"].put(("ADDED", running("stale-before", GPU1)))
    wait_for("the watch from before the poster to end", lambda: own_watch_ended(feeding), timeout=30)
    assert free(feeding) == [62, 122]

    local.objects["pods"] = [running("listed", GPU0)]
    lists = local.lists["pods"]
    first = feeding.process.process
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    wait_for("the extender's own list", lambda: local.lists["pods"] == lists + 1, timeout=30)
    local.events["pods"].put(("ADDED", running("seen-here", GPU1)))
    shows(feeding, "its own watch's pod counted", [62, 62])

    wait_for("the poster back", lambda: feeding.logged(POSTER_STARTED, times=2), timeout=120)
    shows(feeding, "the poster's list replacing the extender's own", [62, 122])
    local.events["pods"].put(("ADDED", running("stale", GPU1)))
    wait_for("the extender's own watch to end at its next event", lambda: own_watch_ended(feeding), timeout=30)
    assert free(feeding) == [62, 122] and "uid-stale" not in feeding.extender.model.placements


def test_the_poster_process_posts_the_binding_with_the_gpu_the_extender_reserved(posting: Posting) -> None:
    assert posting.bind("big") == {"Error": ""}
    ((path, body),) = posting.bindings()
    assert path == "/api/v1/namespaces/default/pods/big/binding"
    placement = posting.extender.model.placements["uid-big"]
    assert body["target"]["name"] == "gpu-a"
    assert body["metadata"]["annotations"]["vgpu.io/gpu-uuid"] == placement.gpu_uuid
    assert placement.bound_at is not None  # the extender heard the Binding went through
    assert posting.api.bindings == []  # nothing posted by the extender's own process


def test_the_bound_line_is_written_by_the_poster_once_the_api_server_bound_the_pod(
    posting: Posting, caplog: pytest.LogCaptureFixture
) -> None:
    """The operator's line for each placed pod ("bound <pod> to <node> GPU <index>", with the GPU's
    UUID and the units) comes from the process that posted the Binding: the poster, after the API
    server's answer, not the extender (its log line was a measurable part of its lock per pod)."""
    caplog.set_level("INFO", logger="vgpu.extender")
    assert posting.bind("big") == {"Error": ""}
    gpu = posting.extender.model.placements["uid-big"].gpu_uuid
    line = f"bound default/big to gpu-a GPU {0 if gpu == GPU0 else 1}"
    wait_for("the poster's bound line", lambda: posting.logged(line), timeout=30)
    assert not [r for r in caplog.records if r.getMessage().startswith("bound default/big")]


def test_two_binds_at_once_get_a_gpu_each_and_a_third_is_refused_by_the_model(posting: Posting) -> None:
    answers: dict[str, dict[str, Any]] = {}
    threads = [threading.Thread(target=lambda n=n: answers.update({n: posting.bind(n)})) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == {"a": {"Error": ""}, "b": {"Error": ""}}
    gpus = {body["metadata"]["annotations"]["vgpu.io/gpu-uuid"] for _path, body in posting.bindings()}
    assert gpus == {GPU0, GPU1}
    posting.api.pods[("default", "c")] = pod_obj("c", 8000)  # not seen by the watch: read from the API
    status, answer = posting.scheduler.post(
        "/bind", {"PodName": "c", "PodNamespace": "default", "PodUID": "uid-c", "Node": "gpu-a"}
    )
    assert status == 200 and "no single GPU with 8000 MiB free" in answer["Error"], answer
    assert len(posting.bindings()) == 2


def test_a_pod_the_watch_has_not_shown_yet_is_read_from_the_api_and_posted_by_the_poster(posting: Posting) -> None:
    """kube-scheduler can bind a pod before the extender's watch shows it (seen in tests/k8s on a
    loaded machine): its units are read from the API server, and the poster still posts it."""
    assert posting.bind("unseen", watched=False) == {"Error": ""}
    ((path, body),) = posting.bindings()
    assert path.endswith("/pods/unseen/binding") and body["metadata"]["annotations"]["vgpu.io/gpu-uuid"]
    assert posting.api.bindings == []
    assert posting.extender.model.placements["uid-unseen"].bound_at is not None


def test_a_binding_the_api_server_refuses_releases_the_reservation(posting: Posting) -> None:
    posting.apiserver.binding_status = 409
    answer = posting.bind("big")
    assert "binding default/big to gpu-a failed" in answer["Error"] and "409" in answer["Error"], answer
    assert "uid-big" not in posting.extender.model.placements
    assert posting.extender.model.nodes["gpu-a"].max_free == 122  # both GPUs free again
    posting.apiserver.binding_status = 201
    assert posting.bind("big") == {"Error": ""}


def test_a_killed_poster_is_started_again_and_binds_go_on_meanwhile(posting: Posting) -> None:
    """While no poster runs the extender binds from its own process (FakeClusterApi records it);
    the poster comes back and posts again."""
    first = posting.process.process
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    wait_for("the poster seen gone", lambda: not posting.poster.attached or posting.process.starts == 2, timeout=30)
    with contextlib.suppress(AssertionError):  # a bind sent as it died may be answered with why
        posting.bind("during")
    wait_for("the poster started again", lambda: posting.logged(POSTER_STARTED, times=2), timeout=120)
    before = len(posting.bindings())
    assert posting.bind("after") == {"Error": ""}
    assert len(posting.bindings()) == before + 1


def test_the_poster_stops_at_once_with_the_extender(posting: Posting) -> None:
    process = posting.process.process
    assert process is not None  # running, its signal handlers set (Posting waited for its start line)
    posting.process.stop()
    assert process.returncode == 0  # SIGTERM ended it: it was not killed after the 10 s grace
