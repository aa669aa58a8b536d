"""The node annotation (plugin_publisher.py) follows the holders the kubelet PodResources API
lists (plugin_holders.py)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from fakes import GIB, PluginNode, two_gpus

from tests.polling import wait_for

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


def test_node_annotation_follows_pod_resources(node: PluginNode) -> None:
    held = [f"{KEY1}-{n}" for n in range(30)]
    node.pod_resources.holders = [("default", "p1", "main", "vgpu.io/gpu-memory", held)]

    def latest() -> dict[str, Any]:
        return json.loads(node.api.annotations[-1][1]["vgpu.io/gpus"]) if node.api.annotations else {}

    def used() -> list[int]:
        return [g["used_units"] for g in latest().get("gpus", [])]

    wait_for("the annotation to show 30 units used on GPU 1", lambda: used() == [0, 30], 5, 0.05, seen=latest)
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
    wait_for("the annotation to show GPU 1 free again", lambda: used() == [0, 0], 5, 0.05, seen=latest)
