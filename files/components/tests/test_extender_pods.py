"""The extender's pod feed (extender_pods.py) on its own: the poster's end of the records socket
played by the test over a socketpair, the extender's own watch by FakeClusterApi (the real poster
process is in test_extender_poster.py)."""

from __future__ import annotations

import json
import socket
from typing import Any

from fakes import GPU0, GPU1, FakeClusterApi, node_obj, pod_obj
from vgpu_components.extender_pods import PodFeed
from vgpu_components.scheduling import ClusterModel, pod_record

from tests.polling import wait_for


def running(name: str, gpu: str) -> dict[str, Any]:
    pod = pod_obj(name, 6000)
    pod["spec"]["nodeName"] = "gpu-a"
    pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": gpu}
    pod["status"]["phase"] = "Running"
    return pod


def test_records_the_extender_cannot_read_make_it_watch_the_pods_itself() -> None:
    """A line of the poster's that does not decode leaves the model without a live source while
    the poster still runs (it goes on posting Bindings): the extender watches the pods itself."""
    model = ClusterModel("vgpu.io")
    model.set_node(node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 0)]))
    api = FakeClusterApi()
    feed = PodFeed(model, api)
    ours, poster = socket.socketpair()
    feed.from_poster(ours)
    listed = {"pods": [pod_record(running("a", GPU0), "vgpu.io")]}
    poster.sendall(json.dumps(listed).encode() + b"\n")
    wait_for("the poster's list", lambda: "uid-a" in model.placements, timeout=10)
    assert api.lists["pods"] == 0
    api.objects["pods"] = [running("a", GPU0)]
    poster.sendall(b'{"pod": [truncated\n')
    wait_for("the extender's own list", lambda: api.lists["pods"] == 1, timeout=10)
    api.events["pods"].put(("ADDED", running("b", GPU1)))
    wait_for("its own watch's pod counted", lambda: "uid-b" in model.placements, timeout=10)
    feed.stop()
    api.events["pods"].put(None)
    poster.close()
