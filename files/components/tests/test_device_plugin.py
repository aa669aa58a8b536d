"""The device plugin (device_plugin.py) against a real gRPC kubelet peer (FakeKubelet) over unix
sockets: the container contract of an Allocate, MPS per allocation, and main(). Its parts have their
own tests: test_plugin_services, test_plugin_registration, test_plugin_health, test_plugin_publisher.

NVML is replaced by FakeGpus (no GPU on the CI machine) and the API server by RecordingNodeApi;
everything kubelet-facing is real gRPC with the v1beta1 and PodResources v1 wire formats.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path

import pynvml
import pytest
from fakes import (
    GIB,
    FakeGpus,
    PluginNode,
    RecordingNodeApi,
    allocate,
    make_config,
    mps_ask,
    two_gpus,
)
from vgpu_components import device_plugin, ids, kube, mps_requests, nvml
from vgpu_components.allocator import DeviceTable
from vgpu_components.nvml import Gpu

UUID0 = two_gpus()[0].uuid
UUID1 = two_gpus()[1].uuid
KEY0 = hashlib.sha256(UUID0.encode()).hexdigest()[:6]
KEY1 = hashlib.sha256(UUID1.encode()).hexdigest()[:6]


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
        ("/var/run/vgpu/vgpu.region", str(state / "containers" / aid / "vgpu.region"), False),  # the file alone
        ("/etc/vgpu/quota.conf", str(state / "quotas" / f"{aid}.conf"), True),
        # The NVIDIA runtime's device list: the one way an unprivileged container gets a GPU.
        (f"/var/run/nvidia-container-devices/{UUID0}", "/dev/null", True),
    }
    quota = (state / "quotas" / f"{aid}.conf").read_text()
    lines = [line for line in quota.splitlines() if not line.startswith("#")]
    assert lines == [
        "memory_limit=0:3000MiB",
        "limit=1",
        "gpu_virtual_memory=1",
        "gpu_cgroup_enable=0",
        "cgroup_map_mode=0",
        "gpu_compute_audit=0",
    ]
    # The folder is the plugin's (0755) and not mounted; the workload gets a region file of the
    # fixed size libvgpu maps, zeroed, that it may write and not grow (issue 40).
    region = state / "containers" / aid
    assert [p.name for p in region.iterdir()] == ["vgpu.region"]
    assert stat.S_IMODE(region.stat().st_mode) == 0o755
    assert stat.S_IMODE((region / "vgpu.region").stat().st_mode) == 0o666
    assert (region / "vgpu.region").read_bytes() == bytes(1052672)


def test_allocate_wipes_a_stale_region_of_the_same_units(node: PluginNode) -> None:
    device_ids = [f"{KEY1}-{n}" for n in range(10)]
    region = Path(node.cfg["state_dir"]) / "containers" / ids.alloc_id(device_ids)
    region.mkdir(parents=True)
    (region / "vgpu.region").write_bytes(b"old container's counters")
    allocate(node, device_ids)
    assert region.is_dir() and (region / "vgpu.region").read_bytes() == bytes(1052672)


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
        own = mps_requests.pipe_folder(pipe, ids.alloc_id([f"{KEY0}-0"]))
        assert [(m.container_path, m.host_path, m.read_only) for m in got.mounts if "mps" in m.host_path] == [
            (pipe, str(own), True)
        ]
        assert mps_ask(own, "get_default_active_thread_percentage") == "50.0"
        assert got.envs["VGPU_MEMORY_LIMIT"] == "100MiB"
    finally:
        n.stop()


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
