"""The node annotation (plugin_publisher.py) follows the holders the kubelet PodResources API
lists (plugin_holders.py)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from fakes import GIB, PluginNode, two_gpus

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


def test_node_annotation_follows_pod_resources(node: PluginNode) -> None:
    held = [f"{KEY1}-{n}" for n in range(30)]
    node.pod_resources.holders = [("default", "p1", "main", "vgpu.io/gpu-memory", held)]
    deadline = time.monotonic() + 5

    def latest() -> dict[str, Any]:
        return json.loads(node.api.annotations[-1][1]["vgpu.io/gpus"])

    while time.monotonic() < deadline:
        if node.api.annotations and latest()["gpus"][1]["used_units"] == 30:
            break
        time.sleep(0.05)
    doc = latest()
    assert node.api.annotations[-1][0] == "node-a"
    assert doc["unit_mib"] == 100
    assert doc["gpus"][0] == {
        "uuid": UUID0,
        "index": 0,
        "key": KEY0,
        "total_mib": 12 * GIB,
        "units": 122,
        "used_units": 0,
        "healthy": True,
    }
    assert doc["gpus"][1]["used_units"] == 30
    node.pod_resources.holders = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and latest()["gpus"][1]["used_units"] != 0:
        time.sleep(0.05)
    assert latest()["gpus"][1]["used_units"] == 0
