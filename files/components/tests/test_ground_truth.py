"""Ground truth: each container's real GPU memory against its quota (ground_truth.py,
cgroups.py, enforcement.py and cgpu-monitor's metrics).

NVML is FakeGpus reporting per-process use (no GPU here), /proc is a folder of cgroup files, and
the API server is RecordingPodApi; tests/k8s posts the Event and the eviction to a real
kube-apiserver, and tests/gpu/ground_truth.sh runs the detection against the real driver.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from fakes import GPUS, Exporter, FakeGpus, RecordingPodApi, cgroup_of, gpu_pod, value
from vgpu_components import cgroups, config, ground_truth, nvml
from vgpu_components.enforcement import Enforcer
from vgpu_components.ground_truth import Container, Owner, Tracker, Usage

MIB = 1024 * 1024
UID = "6c3f2a53-1b2c-4d5e-8f90-0a1b2c3d4e5f"
CID = "a" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2, systemd driver, containerd
        (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}.slice/"
         f"cri-containerd-{CID}.scope\n", (UID, CID)),
        # guaranteed QoS, CRI-O
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n", (UID, CID)),
        # cgroup v1, cgroupfs driver (k3s), one line per hierarchy
        (f"12:memory:/kubepods/besteffort/pod{UID}/{CID}\n11:pids:/kubepods/besteffort/pod{UID}/{CID}\n"
         "1:name=systemd:/\n", (UID, CID)),
        # docker, seen from inside another cgroup namespace
        (f"0::/../../kubepods-burstable-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope\n", (UID, CID)),
        # cgroup v2, cgroupfs driver, as cgpu-monitor reads it from its own pod's cgroup namespace
        # (/kubepods/burstable/pod<its uid>/<its id>): relative, no "kubepods" left in it
        (f"0::/../../../besteffort/pod{UID}/{CID}\n", (UID, CID)),
        (f"0::/../../pod{UID}/{CID}\n", (UID, CID)),
        # not in a pod: a host daemon, the pod's own cgroup (no container), a user session
        ("0::/system.slice/containerd.service\n", None),
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice\n", None),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
        ("0::/\n", None),  # the reader's own cgroup namespace root
        (f"0::/../../system.slice/docker-{CID}.scope\n", None),  # a container in no pod
    ],
)  # fmt: skip
def test_a_process_cgroup_names_its_pod_and_container(text: str, expected: tuple[str, str] | None) -> None:
    ref = cgroups.parse(text)
    assert (None if ref is None else (ref.pod_uid, ref.container_id)) == expected


def test_a_vanished_process_has_no_container(tmp_path: Path) -> None:
    assert cgroups.container_of(4242, tmp_path) is None


WHO = Container("team", "trainer", "main")


def usage(used_mib: int, processes: int = 1, quota_mib: int = 3000) -> Usage:
    return Usage(WHO, quota_mib * MIB, used_mib * MIB, processes, {"GPU-0"})


def test_over_quota_plus_the_allowance_per_process_for_the_grace_period_is_one_violation() -> None:
    tracker = Tracker(grace_s=30, allowance_bytes=512 * MIB)
    assert tracker.observe([usage(3500)], now=0) == []  # a context's worth over: honest
    assert tracker.observe([usage(4000, processes=2)], now=1) == []  # two processes, two allowances
    assert tracker.observe([usage(3600)], now=2) == []  # over: the grace period starts
    assert tracker.observe([usage(3600)], now=31) == []
    (violation,) = tracker.observe([usage(3600)], now=32)
    assert (violation.used_bytes, violation.limit_bytes, violation.over_seconds) == (3600 * MIB, 3512 * MIB, 30)
    assert "holds 3600 MiB" in violation.describe() and "quota of 3000 MiB" in violation.describe()
    assert tracker.observe([usage(3600)], now=60) == []  # reported once
    tracker.retry(WHO)  # the action did not happen
    assert len(tracker.observe([usage(3600)], now=61)) == 1


def test_dropping_back_under_or_ending_starts_the_grace_period_again() -> None:
    tracker = Tracker(grace_s=10, allowance_bytes=0)
    tracker.observe([usage(4000)], now=0)
    tracker.observe([usage(2000)], now=9)  # back under
    assert tracker.observe([usage(4000)], now=15) == []
    assert tracker.observe([usage(4000)], now=24) == []
    assert len(tracker.observe([usage(4000)], now=25)) == 1
    tracker.observe([], now=26)  # its processes ended
    assert tracker.over_seconds(WHO, now=27) == 0.0


def test_usage_sums_a_containers_processes_and_sets_aside_memory_of_no_quota() -> None:
    owners = {1: Owner(WHO, 3000 * MIB), 2: Owner(WHO, 3000 * MIB), 3: Owner(Container("kube-system", "mps", "d"), 0)}
    seen = [("GPU-0", 1, 100 * MIB), ("GPU-1", 2, 200 * MIB), ("GPU-0", 3, 50 * MIB), ("GPU-0", 9, 7 * MIB)]
    (one,), unaccounted = ground_truth.usages(seen, owners.get)
    assert (one.used_bytes, one.processes, one.gpus) == (300 * MIB, 2, {"GPU-0", "GPU-1"})
    assert unaccounted == {"GPU-0": 57 * MIB}


class Node:
    """An enforcer on node-a: fake NVML, a /proc of cgroup files, a recording API server."""

    def __init__(self, root: Path, **monitor: Any) -> None:
        self.cfg = config.load(None, environ={})
        self.cfg["monitor"].update({"grace_seconds": 10.0, "context_allowance_mib": 512, **monitor})
        self.proc = root / "proc"
        self.backend = FakeGpus(GPUS)
        self.api = RecordingPodApi()
        self.enforcer = Enforcer(self.cfg, "node-a", self.backend, self.api, self.proc)

    def run(self, pid: int, pod: dict[str, Any], mib: int, container_id: str = CID) -> None:
        """Process `pid` of the pod's container holds `mib` MiB on GPU 0."""
        cgroup_of(self.proc, pid, pod, container_id)
        self.backend.process_mib[GPUS[0].uuid][pid] = mib


def test_a_container_over_its_quota_past_the_grace_period_is_evicted_with_an_event(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)  # 3000 MiB
    node.api.pods = [pod]
    node.run(4242, pod, 4000)
    assert node.enforcer.check(now=0) == []
    assert node.api.events == [] and node.api.evictions == []
    (violation,) = node.enforcer.check(now=10)
    assert violation.container == Container("team", "trainer", "main", pod["metadata"]["uid"])
    ((name, reason, message),) = node.api.events
    assert (name, reason) == ("trainer", "GPUMemoryOverQuota") and "evicting the pod" in message
    assert node.api.evictions == [("team", "trainer")]
    assert node.enforcer.check(now=20) == [] and len(node.api.evictions) == 1  # once


def test_report_mode_posts_the_event_and_evicts_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path, enforcement="report")
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.run(4242, pod, 4000)
    node.enforcer.check(now=0)
    node.enforcer.check(now=10)
    assert [r for _n, r, _m in node.api.events] == ["GPUMemoryOverQuota"] and "reported only" in node.api.events[0][2]
    assert node.api.evictions == []


def test_an_eviction_a_disruption_budget_refuses_is_said_and_tried_again(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.api.refuse_evictions = True
    node.run(4242, pod, 4000)
    node.enforcer.check(now=0)
    node.enforcer.check(now=10)
    assert [r for _n, r, _m in node.api.events] == ["GPUMemoryOverQuota", "GPUMemoryEvictionRefused"]
    node.api.refuse_evictions = False
    node.enforcer.check(now=15)
    assert node.api.evictions == [("team", "trainer")]


def test_honest_containers_and_processes_without_a_quota_are_left_alone(tmp_path: Path) -> None:
    node = Node(tmp_path)
    honest = gpu_pod("honest", 30)  # no container status yet: its only container with units
    mps = gpu_pod("nvidia-mps", 0, namespace="kube-system", container_id="b" * 64)
    node.api.pods = [honest, mps]
    node.run(1001, honest, 3400)  # 3000 MiB quota + one context
    node.run(1002, mps, 900, container_id="b" * 64)  # the MPS server holds memory for its clients
    node.backend.process_mib[GPUS[0].uuid][1003] = 300  # a host process, in no pod
    for now in (0, 10, 20, 30):
        assert node.enforcer.check(now=now) == []
    assert node.api.events == [] and node.api.evictions == []
    assert node.enforcer.latest.unaccounted == {GPUS[0].uuid: 1200 * MIB}
    (seen,) = node.enforcer.latest.usages
    assert (seen.container.pod, seen.used_bytes) == ("honest", 3400 * MIB)


def test_a_claim_container_over_its_claims_quota_is_evicted_too(tmp_path: Path) -> None:
    """vgpu_scheduling dra: the pod asks for no units; its quota is its claim's (from kubelet's
    PodResources and the driver's quota file, which cgpu-monitor hands the enforcer)."""
    node = Node(tmp_path)
    claimer = gpu_pod("claimer", 0, container_id=CID)
    node.api.pods = [claimer]
    node.enforcer.claim_quotas = lambda: {("team", "claimer", "main"): 3000 * MIB}
    node.run(4242, claimer, 4000)
    assert node.enforcer.check(now=0) == []
    (violation,) = node.enforcer.check(now=10)
    assert violation.container.pod == "claimer" and violation.quota_bytes == 3000 * MIB
    assert node.api.evictions == [("team", "claimer")]


def test_the_monitor_exports_the_ground_truth(short_tmp: Path) -> None:
    exporter = Exporter(short_tmp)
    try:
        node = Node(short_tmp)
        pod = gpu_pod("trainer", 30, container_id=CID)
        node.api.pods = [pod]
        node.run(4242, pod, 4000)
        node.backend.process_mib[GPUS[1].uuid][9] = 64
        exporter.collector.enforcer = node.enforcer
        node.enforcer.check(now=0)
        node.enforcer.check(now=12)
        metrics = exporter.scrape()
        labels = {"namespace": "team", "pod": "trainer", "container": "main", "UUID": GPUS[0].uuid, "gpu": "0"}
        assert value(metrics, "vgpu_container_memory_real_bytes", **labels) == 4000 * MIB
        assert value(metrics, "vgpu_container_memory_limit_bytes", **labels) == 3512 * MIB
        assert value(metrics, "vgpu_container_over_quota_seconds", **labels) == 12
        assert value(metrics, "vgpu_gpu_memory_unaccounted_bytes", UUID=GPUS[1].uuid) == 64 * MIB
        assert value(metrics, "vgpu_quota_violations_total", action="evicted") == 1
    finally:
        exporter.stop()


def test_the_command_line_catches_a_given_process_over_its_quota(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The GPU host's mode (tests/gpu/ground_truth.sh): pids given, no kubelet; a descendant of a
    given pid counts as its container's."""
    backend = FakeGpus(GPUS)
    backend.process_mib[GPUS[0].uuid][os.getpid()] = 2000
    monkeypatch.setattr(nvml, "NvmlBackend", lambda: backend)
    args = [
        "--pid",
        f"{os.getppid()}=ns/pod/main:1000",
        "--grace",
        "0.2",
        "--interval",
        "0.1",
        "--allowance-mib",
        "512",
    ]
    assert ground_truth.main([*args, "--until-violation", "--duration", "10"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0]["container"] == "ns/pod/main" and lines[0]["used_mib"] == 2000 and lines[0]["limit_mib"] == 1512
    assert "holds 2000 MiB" in lines[-1]["violation"]
    backend.process_mib[GPUS[0].uuid][os.getpid()] = 1400  # within quota + one context
    assert ground_truth.main([*args, "--until-violation", "--duration", "1"]) == 1
