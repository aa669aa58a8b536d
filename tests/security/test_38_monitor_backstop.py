"""Issue 38: a tenant who knows cgpu-monitor's rules outwaited or dodged its backstop. Each test is
one pattern of the review, run through the real Enforcer: the quotas are the ones the real
allocator wrote into the quota files, read back through a real PodResources server; NVML is the
component tests' fake or the real NvmlBackend over a stand-in pynvml (no GPU here), /proc a
folder of the processes' files, the API server the recording fake (tests/k8s/test_monitor_backstop.py
runs the same patterns against a real kube-apiserver, tests/gpu/kubelet/backstop.sh through the
real kubelet on the H200).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import Exporter, RecordingPodApi, StandInNvml, cgroup_of, gpu_pod, nvml_backend, started, value
from vgpu_components import allocator, container
from vgpu_components.enforcement import Enforcer
from vgpu_components.host_paths import HostPaths
from vgpu_components.nvml import Gpu

MIB = 1024 * 1024
H200 = Gpu(uuid="GPU-2a1d5f0e-98c4-4c7e-9b1f-5d6e7f809a1b", index=0, total_mib=143771, name="NVIDIA H200")


class Node:
    """One H200 node: the exporter (quota files, PodResources), the enforcer and its /proc."""

    def __init__(self, root: Path, **monitor: Any) -> None:
        self.exporter = Exporter(root, [H200])
        self.exporter.cfg["monitor"].update({"grace_seconds": 30.0, **monitor})
        self.table = allocator.DeviceTable([H200], unit_mib=100)
        self.api = RecordingPodApi()
        self.proc = root / "proc"
        self.enforcer = Enforcer(
            self.exporter.cfg, "node-a", self.exporter.backend, self.api, self.proc,
            quotas=self.exporter.collector.quotas,
        )  # fmt: skip
        self.exporter.collector.enforcer = self.enforcer
        self.next_unit = 0

    def pod(self, name: str, mib: int, container_id: str, **spec: Any) -> dict[str, Any]:
        """A pod whose container `main` the device plugin allocated `mib` MiB (its quota file)."""
        units = mib // 100
        device_ids = self.table.gpus()[0].device_ids()[self.next_unit : self.next_unit + units]
        self.next_unit += units
        HostPaths(self.exporter.cfg["state_dir"], grace_s=300).prepare(
            [container.build_allocation(self.table, device_ids, self.exporter.cfg)]
        )
        self.exporter.pod_resources.holders.append(("team", name, "main", "vgpu.io/gpu-memory", device_ids))
        pod = gpu_pod(name, units, container_id=container_id)
        pod["spec"].update(spec)
        self.api.pods.append(pod)
        return pod

    def holds(self, pid: int, pod: dict[str, Any], mib: int, container_id: str) -> None:
        cgroup_of(self.proc, pid, pod, container_id)
        self.exporter.backend.process_mib[H200.uuid][pid] = mib


@pytest.fixture
def node(short_tmp: Path) -> Iterator[Node]:
    node = Node(short_tmp)
    yield node
    node.exporter.stop()


def test_a_pod_that_ignores_sigterm_with_a_years_grace_is_deleted_at_once(node: Node) -> None:
    """Item 1: deleted with its own grace (a year) and never acted on again, the pod kept 40000 MiB
    on a 1000 MiB quota."""
    holdout = node.pod("holdout", 1000, "a" * 64, terminationGracePeriodSeconds=365 * 24 * 3600)
    node.holds(101, holdout, 40000, "a" * 64)
    for now in (0, 30, 35):
        node.enforcer.check(now=now)
    assert node.api.deletes == [("team", "holdout", 5), ("team", "holdout", 0)]
    assert value(node.exporter.scrape(), "vgpu_quota_violations_total", action="forced") == 1


def test_a_pod_over_its_quota_80_percent_of_the_time_is_evicted(node: Node) -> None:
    """Item 4: 24 s over, 6 s under, every 30 s; one check under reset the grace timer."""
    flapper = node.pod("flapper", 1000, "b" * 64)
    node.holds(102, flapper, 3000, "b" * 64)
    for now in range(0, 600, 2):
        node.exporter.backend.process_mib[H200.uuid][102] = 3000 if now % 30 < 24 else 900
        node.enforcer.check(now=now)
        if node.api.evictions:
            break
    assert node.api.evictions == [("team", "flapper")]


def test_sixty_small_contexts_are_one_container_over_its_quota(node: Node) -> None:
    """Item 5: 60 processes with contexts made 270 MiB held 16200 MiB on a 1000 MiB quota, within
    the allowance of 512 MiB per process."""
    swarm = node.pod("swarm", 1000, "c" * 64)
    for pid in range(200, 260):
        node.holds(pid, swarm, 270, "c" * 64)
    node.enforcer.check(now=0)
    node.enforcer.check(now=30)
    assert node.api.evictions == [("team", "swarm")]
    assert value(node.exporter.scrape(), "vgpu_container_memory_limit_bytes", pod="swarm") == 1512 * MIB


def test_a_vulkan_process_is_seen_and_evicted(node: Node) -> None:
    """Item 3: NVML's graphics list was never read; the real NvmlBackend over a stand-in pynvml."""
    stand_in = StandInNvml([H200])
    node.enforcer.backend = nvml_backend(stand_in, [H200])
    renderer = node.pod("renderer", 1000, "d" * 64)
    cgroup_of(node.proc, 103, renderer, "d" * 64, command="vkcube --headless")
    stand_in.processes[H200.uuid]["graphics"][103] = 9000
    node.enforcer.check(now=0)
    node.enforcer.check(now=30)
    assert node.api.evictions == [("team", "renderer")]


GPU_FILES = ["nvidiactl", "nvidia0", "nvidia-uvm"]


def test_fork_orphans_are_charged_to_their_pod_and_a_reused_pid_blames_no_one(node: Node) -> None:
    """Item 2: three rounds of allocate 5730 MiB, fork a child that keeps the driver's file
    descriptors, exit (seen on the H200: three dead PIDs holding 5730 MiB each). The dead PIDs
    were filed as host processes that cannot be evicted, and one of them, reused by a process of
    an innocent pod, got that pod evicted. The memory is the forker's, whose children hold the GPU."""
    forker = node.pod("forker", 1000, "e" * 64)
    innocent = node.pod("innocent", 1000, "f" * 64)
    for dead, keeper in ((4242, 5001), (4243, 5002), (4244, 5003)):
        node.exporter.backend.process_mib[H200.uuid][dead] = 5730
        cgroup_of(node.proc, keeper, forker, "e" * 64, command="vgpu-memory-usage 5730 3600 --fork-orphan")
        started(node.proc, keeper, 50000 + keeper, holds=GPU_FILES)
    cgroup_of(node.proc, 4243, innocent, "f" * 64, command="sleep 3600")  # PID 4243 reused
    started(node.proc, 4243, 99999)
    node.enforcer.check(now=0)
    node.enforcer.check(now=30)
    assert node.api.evictions == [("team", "forker")] and node.api.node_events == []
    ((pod, _reason, message),) = node.api.events
    assert pod == "forker" and "17190 MiB of it listed under processes that exited" in message
    assert value(node.exporter.scrape(), "vgpu_gpu_memory_unattributed_bytes", UUID=H200.uuid) == 0


def test_memory_no_process_is_listed_for_is_reported(node: Node) -> None:
    """Item 2, reconciliation: 20000 MiB the GPU reports used that no NVML entry names and no
    container can be tied to: the metric and an Event on the node."""
    node.exporter.backend.used_mib[H200.uuid] = 20000
    node.enforcer.check(now=0)
    ((_node, reason, message),) = node.api.node_events
    assert reason == "GPUMemoryUnattributed" and "20000 MiB" in message
    assert value(node.exporter.scrape(), "vgpu_gpu_memory_unattributed_bytes", UUID=H200.uuid) == 20000 * MIB
