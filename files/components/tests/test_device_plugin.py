"""The device plugin against a real gRPC kubelet peer (FakeKubelet) over unix sockets.

NVML is replaced by FakeGpus (no GPU on the CI machine) and the API server by RecordingNodeApi;
everything kubelet-facing is real gRPC with the v1beta1 and PodResources v1 wire formats.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pynvml
import pytest
from fakes import (
    GIB,
    FakeGpus,
    FakeKubelet,
    PluginNode,
    RecordingNodeApi,
    allocate,
    make_config,
    mps_ask,
    two_gpus,
)
from vgpu_components import device_plugin, ids, kube, mps, nvml
from vgpu_components.allocator import DeviceTable
from vgpu_components.device_plugin import DevicePlugin
from vgpu_components.nvml import Gpu
from vgpu_components.plugin_services import AdvertiseError, check_message_size

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


@pytest.fixture
def node(short_tmp: Path) -> Iterator[PluginNode]:
    n = PluginNode(short_tmp, xid_recovery_s=0.6, pod_resources_poll_s=0.1)
    yield n
    n.stop()


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


def test_preferred_allocation_packs_one_container_on_the_fullest_gpu_that_fits(node: PluginNode) -> None:
    msgs = node.kubelet.msgs
    available = [f"{KEY0}-{n}" for n in range(50)] + [f"{KEY1}-{n}" for n in range(122)]

    def prefer(size: int, must: list[str] | None = None) -> list[str]:
        req = msgs.PreferredAllocationRequest(
            container_requests=[
                msgs.ContainerPreferredAllocationRequest(
                    available_deviceIDs=available, must_include_deviceIDs=must or [], allocation_size=size
                )
            ]
        )
        return list(node.kubelet.stub.GetPreferredAllocation(req, timeout=5).container_responses[0].deviceIDs)

    small = prefer(30)
    assert len(small) == 30 and all(d.startswith(KEY0 + "-") for d in small)  # GPU0 has less free and fits
    big = prefer(80)
    assert len(big) == 80 and all(d.startswith(KEY1 + "-") for d in big)  # only GPU1 fits 80
    reused = prefer(20, must=[f"{KEY1}-5"])
    assert f"{KEY1}-5" in reused and all(d.startswith(KEY1 + "-") for d in reused)


def test_allocate_returns_the_container_contract_and_writes_quota_and_region(node: PluginNode) -> None:
    device_ids = [f"{KEY0}-{n}" for n in range(30)]
    response = allocate(node, device_ids)
    assert len(response.container_responses) == 1
    got = response.container_responses[0]
    assert dict(got.envs) == {
        "NVIDIA_VISIBLE_DEVICES": UUID0,
        "CUDA_VISIBLE_DEVICES": "0",
        "VGPU_MEMORY_LIMIT": "3000MiB",
        "VGPU_CONFIG_FILE": "/etc/vgpu/quota.conf",
        "VGPU_REGION_DIR": "/var/run/vgpu",
        "LD_LIBRARY_PATH": "/opt/vgpu",
        "LD_PRELOAD": "/opt/vgpu/libvgpu.so",
        "GPU_VIRTUAL_MEMORY": "1",
        "LIMIT": "1",
        "GPU_CGROUP_ENABLE": "0",
        "CGROUP_MAP_MODE": "0",
        "GPU_COMPUTE_AUDIT": "0",
    }
    aid = hashlib.sha256(",".join(sorted(device_ids)).encode()).hexdigest()[:16]
    state = Path(node.cfg["state_dir"])
    mounts = {(m.container_path, m.host_path, m.read_only) for m in got.mounts}
    assert mounts == {
        ("/opt/vgpu", "/opt/vgpu", True),
        ("/var/run/vgpu", str(state / "containers" / aid), False),
        ("/etc/vgpu/quota.conf", str(state / "quotas" / f"{aid}.conf"), True),
        # The NVIDIA runtime's device list: the one way an unprivileged container gets a GPU.
        (f"/var/run/nvidia-container-devices/{UUID0}", "/dev/null", True),
    }
    quota = (state / "quotas" / f"{aid}.conf").read_text()
    lines = [line for line in quota.splitlines() if not line.startswith("#")]
    assert lines == [
        "memory_limit=0:3000MiB",
        "gpu_virtual_memory=1",
        "limit=1",
        "gpu_cgroup_enable=0",
        "cgroup_map_mode=0",
        "gpu_compute_audit=0",
    ]
    # The folder is the plugin's (0755); the workload gets an empty region file it may write.
    region = state / "containers" / aid
    assert [p.name for p in region.iterdir()] == ["vgpu.region"]
    assert stat.S_IMODE(region.stat().st_mode) == 0o755
    assert stat.S_IMODE((region / "vgpu.region").stat().st_mode) == 0o666
    assert (region / "vgpu.region").stat().st_size == 0


def test_allocate_wipes_a_stale_region_of_the_same_units(node: PluginNode) -> None:
    device_ids = [f"{KEY1}-{n}" for n in range(10)]
    region = Path(node.cfg["state_dir"]) / "containers" / ids.alloc_id(device_ids)
    region.mkdir(parents=True)
    (region / "vgpu.region").write_bytes(b"old container's counters")
    allocate(node, device_ids)
    assert region.is_dir() and (region / "vgpu.region").stat().st_size == 0


@pytest.mark.parametrize(
    ("device_ids", "message"),
    [
        ([f"{KEY0}-1", f"{KEY1}-2"], "must come from one GPU"),
        (["ffffff-1"], "not on this node"),
        ([f"{KEY0}-999"], "has only 122 units"),
        (["GPU-1234"], "not of the form"),
        ([f"{KEY0}-1", f"{KEY0}-1"], "duplicate"),
    ],
)
def test_allocate_refuses_bad_device_sets_with_a_reason(node: PluginNode, device_ids: list[str], message: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        allocate(node, device_ids)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_mps_adds_the_pipe_of_the_containers_own_daemon_read_only(short_tmp: Path) -> None:
    """A tenant gets its own MPS daemon's pipe folder, read-only, and nothing else of MPS: it cannot
    plant files where the daemon looks, reach another allocation's daemon, or raise a limit from its
    environment (clients only connect to the sockets; tests/gpu/mps_readonly_pipe.sh showed on the
    H200 that an MPS client runs with the folder read-only)."""
    n = PluginNode(short_tmp, mps_enabled=True, mps_active_thread_percentage=50)
    try:
        got = allocate(n, [f"{KEY0}-0"]).container_responses[0]
        pipe = n.cfg["mps"]["pipe_dir"]
        assert {k: v for k, v in got.envs.items() if k.startswith("CUDA_MPS")} == {"CUDA_MPS_PIPE_DIRECTORY": pipe}
        own = mps.pipe_folder(pipe, ids.alloc_id([f"{KEY0}-0"]))
        assert [(m.container_path, m.host_path, m.read_only) for m in got.mounts if "mps" in m.host_path] == [
            (pipe, str(own), True)
        ]
        assert mps_ask(own, "get_default_active_thread_percentage") == "50.0"
        assert got.envs["VGPU_MEMORY_LIMIT"] == "100MiB"
    finally:
        n.stop()


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


def test_xid_marks_gpu_unhealthy_and_it_recovers(node: PluginNode) -> None:
    node.kubelet.wait_update(1)
    node.backend.inject_xid(UUID0, 13)  # application error: not the GPU's fault
    time.sleep(0.3)
    assert len(node.kubelet.updates) == 1
    node.backend.inject_xid(UUID0, 79)  # fallen off the bus
    sick = dict(node.kubelet.wait_update(2))
    assert {sick[f"{KEY0}-{n}"] for n in range(122)} == {"Unhealthy"}
    assert {sick[f"{KEY1}-{n}"] for n in range(122)} == {"Healthy"}
    assert any(reason == "GPUUnhealthy" and UUID0 in msg for _node, reason, msg in node.api.events)
    well = dict(node.kubelet.wait_update(3, timeout=5))
    assert set(well.values()) == {"Healthy"}


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


def test_too_small_unit_is_refused_loudly_and_default_unit_fits_an_8x141g_node() -> None:
    big = [Gpu(uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd", index=i, total_mib=141 * GIB) for i in range(8)]
    size = check_message_size(DeviceTable(big, 100), 2 * 1024 * 1024)
    assert size < 2 * 1024 * 1024
    with pytest.raises(AdvertiseError) as err:
        check_message_size(DeviceTable(big, 1), 2 * 1024 * 1024)
    assert "set unit_mib to at least" in str(err.value)


def test_main_posts_an_event_when_it_refuses_to_advertise(monkeypatch: pytest.MonkeyPatch, short_tmp: Path) -> None:
    """main() with a fake NVML and a recording API: the refusal is an event and exit code 2."""
    big = [Gpu(uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd", index=i, total_mib=141 * GIB) for i in range(8)]
    api = RecordingNodeApi()
    monkeypatch.setattr(nvml, "NvmlBackend", lambda: FakeGpus(big))
    monkeypatch.setattr(kube, "api_client", lambda kubeconfig=None: object())
    monkeypatch.setattr(kube, "KubeNodeApi", lambda client, component: api)
    monkeypatch.setenv("VGPU_UNIT_MIB", "1")
    monkeypatch.setenv("VGPU_LOG_FORMAT", "text")
    monkeypatch.setenv("NODE_NAME", "node-big")
    monkeypatch.setenv("VGPU_DEVICE_PLUGIN_KUBELET_DIR", str(short_tmp))
    assert device_plugin.main(["--config", str(short_tmp / "missing.yaml")]) == 2
    assert api.events and api.events[0][:2] == ("node-big", "GPUMemoryNotAdvertised")
    assert not any(p.suffix == ".sock" for p in short_tmp.iterdir())


def test_key_collision_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "gpu_key", lambda uuid: "abcdef")
    with pytest.raises(ValueError, match="collision"):
        DeviceTable(two_gpus(), 100)


def test_stop_removes_the_socket(short_tmp: Path) -> None:
    n = PluginNode(short_tmp)
    sock = Path(n.cfg["device_plugin"]["kubelet_dir"]) / "vgpu.io-gpu-memory.sock"
    assert sock.is_socket()
    n.stop()
    assert not sock.exists()
    shutil.rmtree(short_tmp / "state", ignore_errors=True)
    assert os.path.isdir(short_tmp)


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


def test_main_explains_a_missing_driver(monkeypatch: pytest.MonkeyPatch, short_tmp: Path) -> None:
    """NVML failing to load as it does without a driver: a clear error, an event, exit status 1."""
    api = RecordingNodeApi()

    def no_driver() -> nvml.NvmlBackend:
        raise pynvml.NVMLError_LibraryNotFound()

    monkeypatch.setattr(nvml, "NvmlBackend", no_driver)
    monkeypatch.setattr(kube, "api_client", lambda kubeconfig=None: object())
    monkeypatch.setattr(kube, "KubeNodeApi", lambda client, component: api)
    monkeypatch.setenv("NODE_NAME", "node-x")
    monkeypatch.setenv("VGPU_DEVICE_PLUGIN_KUBELET_DIR", str(short_tmp))
    assert device_plugin.main(["--config", str(short_tmp / "missing.yaml")]) == 1
    assert api.events and api.events[0][1] == "GPUMemoryNotAdvertised"
    assert "NVML is not usable" in api.events[0][2]


def test_mps_keeps_the_configured_value_when_the_node_cannot_be_read() -> None:
    class Unreachable(RecordingNodeApi):
        def node_labels(self, node: str) -> dict[str, str]:
            raise ConnectionError("connection refused")

    """MPS per node comes from the node label (test_compute_shares); without the API the config stands."""
    cfg = make_config(Path("/nonexistent"), mps_enabled=True)
    device_plugin.node_mps(cfg, Unreachable(), "node-a")
    assert cfg["device_plugin"]["mps_enabled"] is True
    device_plugin.node_mps(cfg, None, "node-a")
    assert cfg["device_plugin"]["mps_enabled"] is True
