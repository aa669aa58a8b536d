"""Compute shares in the device plugin: <prefix>/gpu-cores against a real gRPC kubelet peer
(FakeKubelet, FakePodResources), and the ledger that places memory where the compute is free.

NVML is replaced by FakeGpus (no GPU on the CI machine); nvidia-mps's manager runs with the
stand-in control daemon of test_mps.py; tests/gpu/compute_share.sh measures the real daemon's
defaults on the H200.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from fakes import PluginNode, RecordingNodeApi, allocate, make_config, mps_ask, two_gpus
from vgpu_components import device_plugin, ids, mps_requests
from vgpu_components.mps_requests import READY_FILE
from vgpu_components.shares import Holder, ShareLedger, ShareTokens, holders

from tests.polling import wait_for

KEY0, KEY1 = (hashlib.sha256(g.uuid.encode()).hexdigest()[:6] for g in two_gpus())
CORES = "vgpu.io/gpu-cores"


@pytest.fixture
def shares(short_tmp: Path) -> Iterator[PluginNode]:
    n = PluginNode(short_tmp, mps_enabled=True, compute_shares=True, pod_resources_poll_s=0.1)
    yield n
    n.stop()


def prefer(node: PluginNode, size: int) -> set[str]:
    """The GPU keys of GetPreferredAllocation's answer for `size` units out of every unit."""
    msgs = node.kubelet.msgs
    available = [dev for dev, _health in node.plugin.table.devices()]
    request = msgs.PreferredAllocationRequest(
        container_requests=[
            msgs.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=size)
        ]
    )
    got = node.kubelet.stub.GetPreferredAllocation(request, timeout=5).container_responses[0].deviceIDs
    return {ids.parse_device_id(d)[0] for d in got}


def test_a_node_with_shares_registers_gpu_cores_with_100_tokens_per_gpu(shares: PluginNode) -> None:
    assert [r.resource_name for r in shares.kubelet.registrations] == ["vgpu.io/gpu-memory", CORES]
    tokens = shares.kubelet.wait_stream(CORES, 1)
    assert len(tokens) == 200 and {h for _id, h in tokens} == {"Healthy"}
    assert tokens[0][0] == "cores-0" and tokens[-1][0] == "cores-199"
    # kubelet must not ask the share's plugin for a placement: the share has no GPU of its own.
    assert (
        shares.kubelet.stubs[CORES]
        .GetDevicePluginOptions(shares.kubelet.msgs.Empty())
        .get_preferred_allocation_available
        is False
    )


def test_shares_are_refused_while_the_mps_daemon_is_not_ready(shares: PluginNode) -> None:
    shares.kubelet.wait_stream(CORES, 1)
    (Path(shares.cfg["mps"]["pipe_dir"]) / READY_FILE).unlink()
    gone = shares.kubelet.wait_stream(CORES, 2)
    assert {h for _id, h in gone} == {"Unhealthy"}
    (Path(shares.cfg["mps"]["pipe_dir"]) / READY_FILE).touch()
    assert {h for _id, h in shares.kubelet.wait_stream(CORES, 3)} == {"Healthy"}


def daemon(node: PluginNode, memory_ids: list[str]) -> Path:
    """The pipe folder of the MPS daemon of the container holding these memory units."""
    return mps_requests.pipe_folder(node.cfg["mps"]["pipe_dir"], ids.alloc_id(memory_ids))


def test_the_share_and_the_quota_are_the_containers_own_mps_daemons_not_its_environment(shares: PluginNode) -> None:
    """Issue 28 finding 3: in the environment a tenant could raise them (unset the pinned limit, ask
    100 %); as the defaults of its own MPS daemon no variable changes them (mps.py, measured on the
    H200 by tests/gpu/compute_share.sh)."""
    shares.kubelet.wait_stream(CORES, 1)
    held = [f"{KEY0}-{n}" for n in range(30)]
    memory = allocate(shares, held).container_responses[0]
    envs = dict(memory.envs)
    assert envs["CUDA_MPS_PIPE_DIRECTORY"] == shares.cfg["mps"]["pipe_dir"]
    assert not {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"} & set(envs)
    assert envs["VGPU_MEMORY_LIMIT"] == "3000MiB"
    mounts = {(m.container_path, m.host_path, m.read_only) for m in memory.mounts}
    assert (shares.cfg["mps"]["pipe_dir"], str(daemon(shares, held)), True) in mounts  # its daemon's folder only
    assert mps_ask(daemon(shares, held), "exact_default_device_pinned_mem_limit 0") == "3000M"
    share = allocate(shares, [f"cores-{n}" for n in range(150, 175)], CORES).container_responses[0]
    assert not share.envs and not share.mounts
    assert mps_ask(daemon(shares, held), "get_default_active_thread_percentage") == "25.0"


def test_a_share_allocated_before_its_memory_is_the_daemons_from_the_start(shares: PluginNode) -> None:
    shares.kubelet.wait_stream(CORES, 1)
    allocate(shares, [f"cores-{n}" for n in range(40)], CORES)
    held = [f"{KEY1}-{n}" for n in range(10)]
    allocate(shares, held)
    assert mps_ask(daemon(shares, held), "get_default_active_thread_percentage") == "40.0"


def test_a_container_is_refused_when_its_mps_daemon_does_not_start(short_tmp: Path) -> None:
    """Its CUDA would find no daemon and run without MPS, unlimited: kubelet must not start it."""
    n = PluginNode(short_tmp, mps_enabled=True, nvidia_mps=False)
    assert n.plugin.mps is not None
    n.plugin.mps = dataclasses.replace(n.plugin.mps, start_timeout_s=0.3)
    try:
        with pytest.raises(grpc.RpcError) as err:
            allocate(n, [f"{KEY0}-0"])
        assert "is nvidia-mps running on this node" in err.value.details()
        aid = ids.alloc_id([f"{KEY0}-0"])
        assert mps_requests.read_request(n.cfg["state_dir"], aid) is None  # nothing left behind
        assert not (Path(n.cfg["state_dir"]) / "quotas" / f"{aid}.conf").exists()
    finally:
        n.stop()


@pytest.mark.parametrize(
    ("device_ids", "message"),
    [
        ([f"cores-{n}" for n in range(101)], "a container's compute share is a percentage of one GPU (1-100), got 101"),
        (["cores-200"], "device ID 'cores-200': this node has only 200 compute share units"),
        ([f"{KEY0}-0"], f"device ID '{KEY0}-0' is not of the form cores-<number>"),
        (["cores-1", "cores-1"], "duplicate device IDs"),
    ],
)
def test_bad_shares_are_refused_with_a_reason(shares: PluginNode, device_ids: list[str], message: str) -> None:
    shares.kubelet.wait_stream(CORES, 1)
    with pytest.raises(grpc.RpcError) as err:
        allocate(shares, device_ids, CORES)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in err.value.details()


def test_memory_goes_where_the_compute_is_free_and_the_annotation_says_how_much(shares: PluginNode) -> None:
    """kubelet allocates one container's resources one after the other, either order; the GPU of
    the next container's memory is then the one with the most compute free, and PodResources'
    listing (memory and tokens side by side) takes over from the pairing."""
    shares.kubelet.wait_stream(CORES, 1)
    assert prefer(shares, 10) == {KEY0}  # equal compute free: best-fit, the lowest index
    allocate(shares, [f"cores-{n}" for n in range(60)], CORES)  # share first, then its memory
    allocate(shares, [f"{KEY0}-{n}" for n in range(10)])
    assert prefer(shares, 10) == {KEY1}  # 40 % free on GPU 0, 100 % on GPU 1
    memory = [f"{KEY1}-{n}" for n in range(10)]
    allocate(shares, memory)  # memory first, then its share
    allocate(shares, [f"cores-{n}" for n in range(60, 130)], CORES)
    assert prefer(shares, 10) == {KEY0}  # 40 % against 30 %
    shares.pod_resources.holders = [
        ("default", "b", "main", "vgpu.io/gpu-memory", memory),
        ("default", "b", "main", CORES, [f"cores-{n}" for n in range(60, 130)]),
    ]

    def gpus() -> list[dict[str, Any]]:
        doc = json.loads(shares.api.annotations[-1][1]["vgpu.io/gpus"]) if shares.api.annotations else {}
        return list(doc.get("gpus", []))

    def used_cores() -> list[Any]:
        return [g.get("used_cores") for g in gpus()]

    wait_for("the annotation's used cores [60, 70]", lambda: used_cores() == [60, 70], 5, 0.05, seen=gpus)
    assert [(g["cores"], g["used_cores"]) for g in gpus()] == [(100, 60), (100, 70)]


def test_r470_gets_no_pinned_limit_and_says_why(short_tmp: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("INFO", logger="vgpu.device_plugin")
    n = PluginNode(short_tmp, cuda_version=11040, mps_enabled=True, mps_active_thread_percentage=40)
    try:
        envs = allocate(n, [f"{KEY0}-0"]).container_responses[0].envs
        assert not {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"} & set(envs)
        assert mps_ask(daemon(n, [f"{KEY0}-0"]), "exact_default_device_pinned_mem_limit 0") == "0M"
        # no shares: the node-wide percentage
        assert mps_ask(daemon(n, [f"{KEY0}-0"]), "get_default_active_thread_percentage") == "40.0"
        assert CORES not in [r.resource_name for r in n.kubelet.registrations]
    finally:
        n.stop()
    assert "the driver supports CUDA 11.4; CUDA_MPS_PINNED_DEVICE_MEM_LIMIT needs CUDA 11.5 or newer" in caplog.text


def test_the_pinned_limit_can_be_turned_off(short_tmp: Path) -> None:
    n = PluginNode(short_tmp, mps_enabled=True, mps_pinned_memory_limit=False)
    try:
        allocate(n, [f"{KEY0}-0"])
        assert mps_ask(daemon(n, [f"{KEY0}-0"]), "exact_default_device_pinned_mem_limit 0") == "0M"
    finally:
        n.stop()


def test_without_mps_there_are_no_shares(short_tmp: Path) -> None:
    n = PluginNode(short_tmp, compute_shares=True)
    try:
        assert [r.resource_name for r in n.kubelet.registrations] == ["vgpu.io/gpu-memory"]
        assert not any(k.startswith("CUDA_MPS") for k in allocate(n, [f"{KEY0}-0"]).container_responses[0].envs)
    finally:
        n.stop()


@pytest.mark.parametrize(("label", "want"), [("true", True), ("false", False), (None, None)])
def test_the_nodes_mps_label_decides_over_the_config(label: str | None, want: bool | None, short_tmp: Path) -> None:
    """roles/vgpu_stack turns MPS on per node with the <prefix>/mps label (the nvidia-mps DaemonSet
    runs only there); the shared config carries only the default."""
    for default in (True, False):
        cfg = make_config(short_tmp, mps_enabled=default)
        device_plugin.node_mps(cfg, RecordingNodeApi({"vgpu.io/mps": label} if label else {}), "node-a")
        assert cfg["device_plugin"]["mps_enabled"] is (default if want is None else want)


# --- the ledger alone -----------------------------------------------------------------------------
def test_tokens_name_their_share_and_are_unhealthy_past_the_healthy_gpus() -> None:
    tokens = ShareTokens(gpus=2, cores_per_gpu=150)
    assert tokens.share([f"cores-{n}" for n in range(7)]) == 7
    healthy = [h for _id, h in tokens.devices(healthy_gpus=1, mps_ready=True)]
    assert healthy.count("Healthy") == 150 and healthy.count("Unhealthy") == 150


def test_the_ledger_pairs_adjacent_allocates_and_drops_a_memory_without_a_share() -> None:
    ledger = ShareLedger(unlisted_ttl_s=10)
    ledger.memory_allocated("a", KEY0)
    ledger.memory_allocated("b", KEY1)  # "a" had no share (a pod that bypassed the extender)
    ledger.share_allocated(30)
    ledger.share_allocated(20)
    ledger.memory_allocated("c", KEY0)
    assert ledger.used() == {KEY1: 30, KEY0: 20}
    # PodResources lists "b" with its share: the listing counts it; "c" stays until listed or stale.
    ledger.observe([Holder("b", KEY1, 30)], now=time.monotonic())
    assert ledger.used() == {KEY1: 30, KEY0: 20}
    ledger.observe([Holder("b", KEY1, 30)], now=time.monotonic() + 11)
    assert ledger.used() == {KEY1: 30}
    ledger.observe([], now=time.monotonic() + 12)
    assert ledger.used() == {}


def test_holders_come_from_memory_ids_and_count_tokens() -> None:
    memory = [f"{KEY0}-1", f"{KEY0}-0"]
    got = holders([(memory, ["cores-3", "cores-9"]), ([], ["cores-1"])])
    assert got == [Holder(ids.alloc_id(memory), KEY0, 2)]
