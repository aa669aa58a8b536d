"""Issue 28 finding 2: cgpu-monitor acted only on pods with units. Running the real Enforcer over
the test fakes, a pod without units holding 90000 MiB of an H200 was filed as "unaccounted" and
left alone (only the over-quota control pod, 5000 of 1000 MiB, was evicted); a process that moved
into a cgroup below its container's no longer matched its container at all.

Every byte NVML reports must be tied to a container with a quota (held to it), to a known system
process, or be a violation: a pod without a quota is evicted after the grace like one over its
quota, a host process is reported with its PID and command. The quotas are the ones the real
allocator wrote into the quota files, read back through a real PodResources server; NVML is the
component tests' fake (no GPU here), /proc a folder of cgroup files, the API server the
recording fake (tests/k8s evicts through the real one).
"""

from __future__ import annotations

from pathlib import Path

from fakes import Exporter, RecordingPodApi, cgroup_of, gpu_pod, host_process, value
from vgpu_components import allocator, container
from vgpu_components.enforcement import Enforcer
from vgpu_components.host_paths import HostPaths
from vgpu_components.nvml import Gpu

MIB = 1024 * 1024
H200 = Gpu(uuid="GPU-2a1d5f0e-98c4-4c7e-9b1f-5d6e7f809a1b", index=0, total_mib=143771, name="NVIDIA H200")


def allocate(exporter: Exporter, table: allocator.DeviceTable, first: int, units: int, pod: str) -> None:
    """What the device plugin's Allocate leaves for one container: its quota file and region
    folder, and kubelet's PodResources listing it."""
    device_ids = table.gpus()[0].device_ids()[first : first + units]
    HostPaths(exporter.cfg["state_dir"], grace_s=300).prepare(
        [container.build_allocation(table, device_ids, exporter.cfg)]
    )
    exporter.pod_resources.holders.append(("team", pod, "main", "vgpu.io/gpu-memory", device_ids))


def test_every_byte_on_the_gpu_is_held_to_a_quota(short_tmp: Path) -> None:
    exporter = Exporter(short_tmp, [H200])
    try:
        cfg = exporter.cfg
        cfg["monitor"].update(grace_seconds=30.0)
        table = allocator.DeviceTable([H200], unit_mib=100)
        api = RecordingPodApi()
        proc = short_tmp / "proc"
        enforcer = Enforcer(cfg, "node-a", exporter.backend, api, proc, quotas=exporter.collector.quotas)
        exporter.collector.enforcer = enforcer
        held = exporter.backend.process_mib[H200.uuid]

        def runs(pid: int, pod: dict, mib: int, container_id: str, **where: str) -> None:
            cgroup_of(proc, pid, pod, container_id, **where)
            held[pid] = mib

        honest = gpu_pod("honest", 30, container_id="a" * 64)
        allocate(exporter, table, 0, 30, "honest")
        runs(101, honest, 3200, "a" * 64)  # within 3000 MiB and a context
        control = gpu_pod("control", 10, container_id="b" * 64)
        allocate(exporter, table, 30, 10, "control")
        runs(102, control, 5000, "b" * 64)  # over its 1000 MiB
        unmetered = gpu_pod("unmetered", 0, container_id="c" * 64)  # asks for no GPU memory
        runs(103, unmetered, 90000, "c" * 64)
        escaper = gpu_pod("escaper", 10, container_id="d" * 64)
        allocate(exporter, table, 40, 10, "escaper")
        runs(104, escaper, 4000, "d" * 64, child="hidden")  # moved below its container's cgroup
        api.pods = [honest, control, unmetered, escaper]
        host_process(proc, 105, "/user.slice/user-1000.slice/session-7.scope", "python3 /home/alice/train.py")
        held[105] = 2048

        assert enforcer.check(now=0) == []
        enforcer.check(now=30)
        assert sorted(api.evictions) == [("team", "control"), ("team", "escaper"), ("team", "unmetered")]
        assert {(name, reason) for name, reason, _m in api.events} == {
            ("control", "GPUMemoryOverQuota"),
            ("escaper", "GPUMemoryOverQuota"),
            ("unmetered", "GPUMemoryOverQuota"),
        }
        ((node, reason, message),) = api.node_events
        assert (node, reason) == ("node-a", "GPUMemoryOverQuota")
        assert "process 105 (python3 /home/alice/train.py)" in message and "cannot be evicted" in message

        metrics = exporter.scrape()
        assert "vgpu_gpu_memory_unaccounted_bytes" not in metrics
        assert value(metrics, "vgpu_container_memory_limit_bytes", pod="unmetered") == 0
        assert value(metrics, "vgpu_container_memory_real_bytes", pod="unmetered") == 90000 * MIB
        assert value(metrics, "vgpu_host_process_memory_bytes", pid="105") == 2048 * MIB
        assert value(metrics, "vgpu_quota_violations_total", action="evicted") == 3
        assert value(metrics, "vgpu_quota_violations_total", action="unevictable") == 1
    finally:
        exporter.stop()
