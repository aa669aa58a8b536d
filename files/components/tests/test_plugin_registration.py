"""The device plugin's sockets and registration (plugin_registration.py) against a real gRPC kubelet
peer (FakeKubelet): registering, re-registering after a kubelet restart, a kubelet that starts later,
and the sockets removed at stop."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from fakes import FakeKubelet, PluginNode, make_config, two_gpus
from vgpu_components.allocator import DeviceTable
from vgpu_components.plugin import DevicePlugin

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


def test_registers_and_advertises_every_unit_with_short_stable_ids(node: PluginNode) -> None:
    reg = node.kubelet.registrations[0]
    assert (reg.version, reg.resource_name) == ("v1beta1", "vgpu.io/gpu-memory")
    assert (Path(node.cfg["device_plugin"]["kubelet_dir"]) / reg.endpoint).is_socket()
    assert reg.options.get_preferred_allocation_available
    assert node.kubelet.options.get_preferred_allocation_available
    devices = node.kubelet.wait_update(1)
    # 12 GiB / 100 MiB = 122 units per GPU
    assert len(devices) == 244
    assert {h for _id, h in devices} == {"Healthy"}
    assert {d for d, _health in devices} == {f"{KEY0}-{n}" for n in range(122)} | {f"{KEY1}-{n}" for n in range(122)}
    # The same GPUs give the same IDs after a restart: the key depends only on the UUID.
    again = DeviceTable(list(reversed(two_gpus())), 100)
    assert sorted(d for d, _health in again.devices()) == sorted(d for d, _health in devices)


def test_reregisters_after_a_kubelet_restart_without_a_failed_attempt(
    node: PluginNode, caplog: pytest.LogCaptureFixture
) -> None:
    """The plugin's kubelet watch (every 100 ms) sees the new kubelet.sock and registers with it at
    once: one registration, serving all its units, and no failed attempt (the one path that waits,
    1 s, before trying again)."""
    caplog.set_level("INFO", logger="vgpu.device_plugin")
    node.kubelet.wait_update(1)
    assert node.plugin.registrar.registrations == 1
    node.kubelet.stop()
    # kubelet's device manager empties the folder when it starts, then serves a new kubelet.sock
    folder = Path(node.cfg["device_plugin"]["kubelet_dir"])
    for entry in folder.iterdir():
        entry.unlink()
    restarted = FakeKubelet(folder).start()
    try:
        assert restarted.registered.wait(5)
        assert len(restarted.wait_update(1)) == 244
        assert [r.resource_name for r in restarted.registrations] == ["vgpu.io/gpu-memory"]
        assert node.plugin.registrar.registrations == 2
        failed = [r.getMessage() for r in caplog.records if "registration with kubelet failed" in r.getMessage()]
        assert failed == []
    finally:
        restarted.stop()


def test_waits_for_a_kubelet_that_starts_later(short_tmp: Path) -> None:
    cfg = make_config(short_tmp)
    (short_tmp / "dp").mkdir()
    plugin = DevicePlugin(cfg, two_gpus(), "node-a")
    plugin.start()
    try:
        # start() looked for kubelet once and found none; its watch keeps looking.
        assert plugin.healthy() == (False, "not registered with kubelet")
        kubelet = FakeKubelet(short_tmp / "dp").start()
        try:
            assert kubelet.registered.wait(3)
            assert len(kubelet.wait_update(1)) == 244
            assert plugin.healthy()[0]
        finally:
            kubelet.stop()
    finally:
        plugin.stop()


def test_stop_removes_the_socket(short_tmp: Path) -> None:
    n = PluginNode(short_tmp)
    sock = Path(n.cfg["device_plugin"]["kubelet_dir"]) / "vgpu.io-gpu-memory.sock"
    assert sock.is_socket()
    n.stop()
    assert not sock.exists()
    shutil.rmtree(short_tmp / "state", ignore_errors=True)
    assert os.path.isdir(short_tmp)
