"""The device plugin's sockets and registration (plugin_registration.py) against a real gRPC kubelet
peer (FakeKubelet): registering, re-registering after a kubelet restart, a kubelet that starts later,
and the sockets removed at stop."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path

from fakes import FakeKubelet, PluginNode, make_config, two_gpus
from vgpu_components.allocator import DeviceTable
from vgpu_components.device_plugin import DevicePlugin

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


def test_reregisters_within_a_second_of_a_kubelet_restart(node: PluginNode) -> None:
    node.kubelet.wait_update(1)
    node.kubelet.stop()
    # kubelet's device manager empties the folder when it starts, then serves a new kubelet.sock
    folder = Path(node.cfg["device_plugin"]["kubelet_dir"])
    for entry in folder.iterdir():
        entry.unlink()
    restarted = FakeKubelet(folder).start()
    started = time.monotonic()
    try:
        assert restarted.registered.wait(5)
        elapsed = time.monotonic() - started
        assert elapsed < 1.0, f"re-registration took {elapsed:.2f} s"
        assert len(restarted.wait_update(1)) == 244
        assert restarted.registrations[0].resource_name == "vgpu.io/gpu-memory"
    finally:
        restarted.stop()


def test_waits_for_a_kubelet_that_starts_later(short_tmp: Path) -> None:
    cfg = make_config(short_tmp)
    (short_tmp / "dp").mkdir()
    plugin = DevicePlugin(cfg, two_gpus(), "node-a")
    plugin.start()
    try:
        time.sleep(0.3)
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
