"""The extender's Bindings posted by a second process (extender_poster.py, issue 42): the real
poster process (python -m vgpu_components.extender_poster) started by PosterProcess, posting to
RecordingApiServer over real HTTP, and the extender answering bind over real HTTP on its loop.

No kube-apiserver in unit tests: RecordingApiServer plays it for the poster, FakeClusterApi for
the extender's own reads (tests/k8s runs the whole extender, poster included, against the real
kube-apiserver and kube-scheduler)."""

from __future__ import annotations

import contextlib
import os
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


class Posting:
    """The extender with a poster process, the API server the poster posts to, and kube-scheduler."""

    def __init__(self, folder: Path) -> None:
        self.apiserver = RecordingApiServer()
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
        self.process = PosterProcess(self.poster, [*command, "--kubeconfig", str(kubeconfig)], threading.Event())
        self.process.start()
        wait_for("the poster process attached", lambda: self.poster.attached, timeout=60)

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
        self.process.stop()
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
    wait_for("the poster's bound line", lambda: line in posting.log.read_text(), timeout=30)
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
    wait_for("the poster started again", lambda: posting.process.starts == 2 and posting.poster.attached, timeout=60)
    before = len(posting.bindings())
    assert posting.bind("after") == {"Error": ""}
    assert len(posting.bindings()) == before + 1


def test_the_poster_stops_at_once_with_the_extender(posting: Posting) -> None:
    process = posting.process.process
    assert process is not None
    # Running, its signal handlers set (a SIGTERM before Python set them up kills it with -15).
    started = "posting the extender's Bindings"
    wait_for("the poster's start line", lambda: started in posting.log.read_text(), timeout=60)
    posting.process.stop()
    assert process.returncode == 0  # SIGTERM ended it: it was not killed after the 10 s grace
