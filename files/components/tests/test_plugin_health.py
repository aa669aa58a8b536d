"""Xid health (plugin_health.py): a critical Xid marks the GPU's units Unhealthy in ListAndWatch,
an application Xid does not, and the GPU recovers after xid_recovery_s."""

from __future__ import annotations

import hashlib

from fakes import PluginNode, two_gpus

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


def test_xid_marks_gpu_unhealthy_and_it_recovers(node: PluginNode) -> None:
    node.kubelet.wait_update(1)
    node.backend.inject_xid(UUID0, 13)  # application error: not the GPU's fault
    node.backend.inject_xid(UUID0, 79)  # fallen off the bus: handled after the 13
    sick = dict(node.kubelet.wait_update(2))
    assert {sick[f"{KEY0}-{n}"] for n in range(122)} == {"Unhealthy"}
    assert {sick[f"{KEY1}-{n}"] for n in range(122)} == {"Healthy"}
    # The 13 changed nothing: the one unhealthy event, and the update before it, are the 79's.
    unhealthy = [msg for _node, reason, msg in node.api.events if reason == "GPUUnhealthy"]
    assert unhealthy == [f"GPU {UUID0}: Xid 79"]
    well = dict(node.kubelet.wait_update(3, timeout=5))
    assert set(well.values()) == {"Healthy"}
