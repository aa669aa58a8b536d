"""Ground truth: each container's real GPU memory against its quota (ground_truth.py,
cgroups.py, enforcement.py and cgpu-monitor's metrics).

NVML is FakeGpus reporting per-process use (no GPU here), /proc is a folder of cgroup files, and
the API server is RecordingPodApi; tests/k8s posts the Event and the eviction to a real
kube-apiserver, and tests/gpu/ground_truth.sh runs the detection against the real driver.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from fakes import (
    GPUS,
    Exporter,
    FakeGpus,
    RecordingPodApi,
    StandInNvml,
    cgroup_of,
    gpu_pod,
    host_process,
    nvml_backend,
    started,
    value,
)
from vgpu_components import cgroups, config, ground_truth, nvml, owners
from vgpu_components.enforcement import Enforcer
from vgpu_components.ground_truth import Container, HostProcess, Owner, Tracker, Usage

MIB = 1024 * 1024
UID = "6c3f2a53-1b2c-4d5e-8f90-0a1b2c3d4e5f"
CID = "a" * 64
OTHER_UID = "0f0e0d0c-0b0a-4909-8807-060504030201"


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
        # a child cgroup the process made below its container's (writable cgroupfs) and moved into
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope/escape/deeper\n",
         (UID, CID)),
        (f"0::/../../../besteffort/pod{UID}/{CID}/escape\n", (UID, CID)),
        # ... named after another pod and container: still its own, the first ones in the path
        # (kubelet's; the container can only add parts below them)
        (f"0::/../../pod{UID}/{CID}/pod{OTHER_UID}/{'b' * 64}\n", (UID, CID)),
        (f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope/"
         f"kubepods-pod{OTHER_UID.replace('-', '_')}.slice/cri-containerd-{'b' * 64}.scope\n", (UID, CID)),
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


def test_over_quota_plus_the_allowance_for_the_grace_period_is_one_violation() -> None:
    tracker = Tracker(grace_s=30, allowance_bytes=512 * MIB)
    assert tracker.observe([usage(3500)], now=0) == []  # a context's worth over: honest
    assert tracker.observe([usage(3500, processes=2)], now=1) == []  # one allowance per container
    assert tracker.observe([usage(3600)], now=2) == []  # over since between the two checks: half counts
    assert tracker.observe([usage(3600)], now=31) == []
    (violation,) = tracker.observe([usage(3600)], now=32)
    assert (violation.used_bytes, violation.limit_bytes) == (3600 * MIB, 3512 * MIB)
    assert violation.over_seconds == pytest.approx(30.45)  # 0.5 - 0.05 paid back + 30
    assert "holds 3600 MiB" in violation.describe() and "quota of 3000 MiB" in violation.describe()
    # Due at every check while it stays over (issue 38 item 1): the enforcer acts on it again.
    assert len(tracker.observe([usage(3600)], now=37)) == 1


def oscillate(tracker: Tracker, seconds: int, over_s: int, period_s: int) -> list[float]:
    """Checks every second for `seconds`, the container over its limit for the first `over_s` of
    every `period_s`; when each violation came."""
    due = []
    for now in range(seconds):
        for _violation in tracker.observe([usage(4000 if now % period_s < over_s else 2000)], now=now):
            due.append(float(now))
    return due


def test_time_over_accumulates_so_a_container_over_most_of_the_time_is_caught() -> None:
    """Issue 38 item 4: one check under the limit reset the grace timer, so a container over its
    quota 24 s of every 30 (80 % of an hour) was never acted on with a 30 s grace. Time over now
    accumulates, and time under pays it back ten times slower."""
    due = oscillate(Tracker(grace_s=30, allowance_bytes=0), 3600, over_s=24, period_s=30)
    assert due and due[0] < 60, due[:3]


def test_a_short_excursion_is_paid_back_by_ten_times_as_long_under() -> None:
    tracker = Tracker(grace_s=30, allowance_bytes=0)
    for now in range(0, 21):  # 20 s over
        assert tracker.observe([usage(4000)], now=now) == []
    assert tracker.over_seconds(WHO) == 20
    for now in range(21, 230):  # under for about ten times as long
        assert tracker.observe([usage(2000)], now=now) == []
    assert tracker.over_seconds(WHO) == 0.0
    for now in range(230, 251):  # another 20 s over: still within the grace
        assert tracker.observe([usage(4000)], now=now) == []
    assert oscillate(Tracker(grace_s=30, allowance_bytes=0), 3600, over_s=2, period_s=30) == []  # 1 in 15


def test_ending_its_processes_does_not_reset_the_time_over() -> None:
    """A container whose processes all exit before the grace and start again is the same
    container: its time over is still there (paid back only slowly)."""
    tracker = Tracker(grace_s=30, allowance_bytes=0)
    for now in range(0, 21):
        tracker.observe([usage(4000)], now=now)
    tracker.observe([], now=25)  # its processes ended
    assert tracker.over_seconds(WHO) > 19
    due = [now for now in range(26, 60) if tracker.observe([usage(4000)], now=now)]
    assert due and due[0] <= 40, due


def test_usage_sums_each_containers_processes_and_sets_aside_only_known_system_processes() -> None:
    server = ground_truth.SystemProcess("nvidia-mps", "the MPS server")
    rogue = Container("team", "rogue", "main")
    owners: dict[int, Owner | ground_truth.SystemProcess] = {
        1: Owner(WHO, 3000 * MIB),
        2: Owner(WHO, 3000 * MIB),
        3: server,
        4: Owner(rogue, 0),
    }
    seen = [
        ("GPU-0", 1, 100 * MIB),
        ("GPU-1", 2, 200 * MIB),
        ("GPU-0", 3, 50 * MIB),
        ("GPU-0", 4, 7 * MIB),
        ("GPU-0", 9, 1 * MIB),  # its quota is unknown this check: not judged
    ]
    (one, other), system = ground_truth.usages(seen, owners.get)
    assert (one.used_bytes, one.processes, one.gpus) == (300 * MIB, 2, {"GPU-0", "GPU-1"})
    assert (other.who, other.quota_bytes, other.used_bytes) == (rogue, 0, 7 * MIB)
    assert system == {"GPU-0": 50 * MIB}


def test_no_quota_means_no_allowance_either() -> None:
    """A context allowance absorbs the difference in an honest process's context; a container
    without a quota has no process that should hold any GPU memory."""
    tracker = Tracker(grace_s=0, allowance_bytes=512 * MIB)
    assert tracker.limit(usage(1, quota_mib=0)) == 0
    (violation,) = tracker.observe([usage(1, quota_mib=0)], now=0)
    assert "holds 1 MiB of GPU memory" in violation.describe() and "no GPU-memory quota" in violation.describe()


def test_the_allowance_is_per_container_so_many_small_contexts_are_caught() -> None:
    """Issue 38 item 5: at 512 MiB per process, 60 processes whose contexts were made 270 MiB
    (a tiny stack limit) held 16200 MiB on a 1000 MiB quota and stayed under 1000 + 60 x 512.
    libvgpu keeps a container's processes within its quota plus one context (design.md, "The
    invariant"), so the allowance is one per container, however many processes it runs."""
    tracker = Tracker(grace_s=0, allowance_bytes=512 * MIB)
    many = Usage(WHO, 1000 * MIB, 60 * 270 * MIB, 60, {"GPU-0"})
    assert tracker.limit(many) == 1512 * MIB
    (violation,) = tracker.observe([many], now=0)
    assert "holds 16200 MiB" in violation.describe() and "(1512 MiB in all)" in violation.describe()


def test_consumers_of_one_allocation_are_held_to_its_one_quota_together() -> None:
    """Issue 40 item 1: one ResourceClaim referenced by 8 pods gave each the claim's whole quota:
    8 x 1400 MiB on one 1000 MiB claim, each under 1000 + 512, and nothing was evicted. The
    consumers of one allocation are judged together: their sum against its one quota."""
    tracker = Tracker(grace_s=0, allowance_bytes=512 * MIB)
    pods = [Container("team", f"share-{n}", "main") for n in range(8)]
    current = [Usage(who, 1000 * MIB, 1400 * MIB, 1, {"GPU-0"}) for who in pods]
    shares: dict[Container | HostProcess, frozenset[str]] = {who: frozenset({"a1"}) for who in pods}
    pooled = ground_truth.pool(current, shares.get, {"a1": 1000 * MIB})
    due = tracker.observe(pooled, now=0)
    assert sorted(str(v.who) for v in due) == sorted(str(who) for who in pods)
    first = next(v for v in due if v.who == pods[0])
    assert (first.used_bytes, first.pooled_bytes, first.limit_bytes) == (1400 * MIB, 7 * 1400 * MIB, 1512 * MIB)
    text = first.describe()
    assert "11200 MiB together" in text and "7 other consumer(s) of its allocation" in text, text
    assert "team/share-5/main and 2 more)" in text, text  # five named, the rest counted
    assert "quota of 1000 MiB" in text

    # Two consumers within the one quota together are left alone; one alone is judged as before.
    honest = ground_truth.pool(current[:2], shares.get, {"a1": 1000 * MIB})
    assert [u.used_bytes + u.pooled_bytes for u in honest] == [2800 * MIB] * 2
    calm = [Usage(who, 1000 * MIB, 400 * MIB, 1, {"GPU-0"}) for who in pods[:2]]
    assert Tracker(0, 512 * MIB).observe(ground_truth.pool(calm, shares.get, {"a1": 1000 * MIB}), now=0) == []
    (alone,) = ground_truth.pool(current[:1], shares.get, {"a1": 1000 * MIB})
    assert (alone.pooled_bytes, alone.quota_bytes) == (0, 1000 * MIB)


def test_consumers_linked_through_any_shared_allocation_share_the_sum_of_their_quotas() -> None:
    """A container with two claims (a1 and a2) and another with a1 only: one pool, whose quota is
    a1's plus a2's, each counted once."""
    first, second, apart = (Container("team", name, "main") for name in ("first", "second", "apart"))
    shares: dict[Container | HostProcess, frozenset[str]] = {
        first: frozenset({"a1", "a2"}),
        second: frozenset({"a1"}),
        apart: frozenset({"a3"}),
    }
    current = [
        Usage(first, 3000 * MIB, 2000 * MIB, 1, {"GPU-0"}),
        Usage(second, 1000 * MIB, 1500 * MIB, 1, {"GPU-0"}),
        Usage(apart, 1000 * MIB, 100 * MIB, 1, {"GPU-0"}),
    ]
    quotas = {"a1": 1000 * MIB, "a2": 2000 * MIB, "a3": 1000 * MIB}
    by_who = {u.who: u for u in ground_truth.pool(current, shares.get, quotas)}
    assert (by_who[first].quota_bytes, by_who[first].pooled_bytes) == (3000 * MIB, 1500 * MIB)
    assert (by_who[second].quota_bytes, by_who[second].pooled_bytes) == (3000 * MIB, 2000 * MIB)
    assert (by_who[apart].quota_bytes, by_who[apart].pooled_bytes) == (1000 * MIB, 0)
    due = Tracker(0, 0).observe(list(by_who.values()), now=0)
    assert sorted(v.who.pod for v in due if isinstance(v.who, Container)) == ["first", "second"]


class Node:
    """An enforcer on node-a: fake NVML, a /proc of cgroup files, a recording API server, and the
    containers' quotas as cgpu-monitor reads them from kubelet and the quota files (`quotas`)."""

    def __init__(self, root: Path, **monitor: Any) -> None:
        self.cfg = config.load(None, environ={})
        self.cfg["monitor"].update({"grace_seconds": 10.0, "context_allowance_mib": 512, **monitor})
        self.proc = root / "proc"
        self.backend = FakeGpus(GPUS)
        self.api = RecordingPodApi()
        self.quotas = owners.Quotas()
        self.enforcer = Enforcer(self.cfg, "node-a", self.backend, self.api, self.proc, quotas=lambda: self.quotas)

    def give(self, pod: dict[str, Any], mib: int | None, container: str = "main") -> None:
        """The container's quota as its quota file says (None: the file cannot be read)."""
        meta = pod["metadata"]
        self.quotas[(meta["namespace"], meta["name"], container)] = None if mib is None else mib * MIB

    def share(self, pod: dict[str, Any], alloc_id: str, mib: int, container: str = "main") -> None:
        """The container holds allocation `alloc_id` of `mib` MiB (a DRA claim's device), as
        kubelet's PodResources and the quota file say; several containers may name the same one."""
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"], container)
        self.quotas[key] = mib * MIB
        self.quotas.allocations[key] = frozenset({alloc_id})
        self.quotas.allocation_quotas[alloc_id] = mib * MIB

    def run(self, pid: int, pod: dict[str, Any], mib: int, container_id: str = CID, **where: str) -> None:
        """Process `pid` of the pod's container holds `mib` MiB on GPU 0."""
        cgroup_of(self.proc, pid, pod, container_id, **where)
        self.backend.process_mib[GPUS[0].uuid][pid] = mib


def test_a_container_over_its_quota_past_the_grace_period_is_evicted_with_an_event(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 3000)
    node.run(4242, pod, 4000)
    assert node.enforcer.check(now=0) == []
    assert node.api.events == [] and node.api.evictions == []
    (violation,) = node.enforcer.check(now=10)
    assert violation.who == Container("team", "trainer", "main", pod["metadata"]["uid"])
    ((name, reason, message),) = node.api.events
    assert (name, reason) == ("trainer", "GPUMemoryOverQuota") and "deleting the pod" in message
    assert node.api.evictions == [("team", "trainer")]
    del node.backend.process_mib[GPUS[0].uuid][4242]  # its kubelet stops it
    node.api.pods = []
    assert node.enforcer.check(now=20) == [] and len(node.api.evictions) == 1


def test_a_pod_that_outwaits_its_eviction_is_deleted_at_once_after_the_capped_grace(tmp_path: Path) -> None:
    """Issue 38 item 1: the pod was deleted with its own grace period (a year) and never acted on
    again, so a PID 1 that ignored SIGTERM kept 40000 MiB on a 1000 MiB quota. Its grace is
    capped at monitor.termination_grace_seconds, and at the first check that long after, still
    over, the pod is deleted at once (grace 0: the API object goes and kubelet kills it)."""
    node = Node(tmp_path, termination_grace_seconds=5)
    pod = gpu_pod("holdout", 10, container_id=CID)
    pod["spec"]["terminationGracePeriodSeconds"] = 365 * 24 * 3600
    node.api.pods = [pod]
    node.give(pod, 1000)
    node.run(4242, pod, 40000)
    node.enforcer.check(now=0)
    node.enforcer.check(now=10)
    assert node.api.deletes == [("team", "holdout", 5)]
    node.enforcer.check(now=12)  # not yet: the capped grace is still running
    assert node.api.deletes == [("team", "holdout", 5)]
    node.enforcer.check(now=15)  # still there, still over
    assert node.api.deletes == [("team", "holdout", 5), ("team", "holdout", 0)]
    first, forced = (message for _n, _r, message in node.api.events)
    assert "grace period of 5 s (its own: 31536000 s)" in first
    assert "still over its quota 5 s after" in forced and "deleting it at once" in forced
    node.enforcer.check(now=20)  # the monitor keeps acting while it stays over
    assert node.api.deletes[-1] == ("team", "holdout", 0) and len(node.api.events) == 2
    assert node.enforcer.actions["evicted"] == 1 and node.enforcer.actions["forced"] == 1


def test_a_pod_that_comes_back_over_is_acted_on_again(tmp_path: Path) -> None:
    """Issue 38 item 1: the monitor never acted on the same container twice."""
    node = Node(tmp_path, enforcement="report")
    pod = gpu_pod("again", 10, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 1000)
    node.run(4242, pod, 4000)
    node.enforcer.check(now=0)
    assert len(node.enforcer.check(now=10)) == 1
    assert len(node.enforcer.check(now=15)) == 1 and len(node.api.events) == 1  # one Event while it stays over
    node.backend.process_mib[GPUS[0].uuid][4242] = 500
    assert node.enforcer.check(now=20) == []
    node.backend.process_mib[GPUS[0].uuid][4242] = 4000
    assert len(node.enforcer.check(now=25)) == 1  # its time over is not paid back yet: at once
    assert len(node.api.events) == 2


def test_the_quota_is_the_quota_files_not_the_units_in_the_pod_spec(tmp_path: Path) -> None:
    """One quota per container (issue 26 item 3): the quota file the device plugin wrote at Allocate,
    not the spec's units times today's unit_mib (a changed vgpu_memory_unit_mib leaves running
    containers with the quota they were started with)."""
    node = Node(tmp_path, grace_seconds=0.0)
    node.cfg["unit_mib"] = 50
    pod = gpu_pod("trainer", 30, container_id=CID)  # 30 units: 1500 MiB at today's unit of 50 MiB
    node.api.pods = [pod]
    node.give(pod, 3000)  # allocated at 100 MiB a unit
    node.run(4242, pod, 3400)
    assert node.enforcer.check(now=0) == [] and node.api.evictions == []
    (seen,) = node.enforcer.latest.usages
    assert seen.quota_bytes == 3000 * MIB


def test_report_mode_posts_the_event_and_evicts_nothing(tmp_path: Path) -> None:
    node = Node(tmp_path, enforcement="report")
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 3000)
    node.run(4242, pod, 4000)
    node.enforcer.check(now=0)
    node.enforcer.check(now=10)
    assert [r for _n, r, _m in node.api.events] == ["GPUMemoryOverQuota"] and "reported only" in node.api.events[0][2]
    assert node.api.evictions == []


def test_an_eviction_the_api_server_refuses_is_tried_again(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 3000)
    node.api.refuse_evictions = True
    node.run(4242, pod, 4000)
    node.enforcer.check(now=0)
    node.enforcer.check(now=10)
    assert [r for _n, r, _m in node.api.events] == ["GPUMemoryOverQuota"] and node.api.evictions == []
    node.api.refuse_evictions = False
    node.enforcer.check(now=15)
    assert node.api.evictions == [("team", "trainer")]


MPS_LABELS = {"app.kubernetes.io/name": "nvidia-mps"}


def container(who: Container | HostProcess) -> Container:
    assert isinstance(who, Container), who
    return who


def test_honest_containers_and_the_mps_server_are_left_alone(tmp_path: Path) -> None:
    node = Node(tmp_path)
    honest = gpu_pod("honest", 30)  # no container status yet: its only container with a quota
    mps = gpu_pod(
        "nvidia-mps-x7k2p", 0, namespace="kube-system", container="nvidia-mps", container_id="b" * 64, labels=MPS_LABELS
    )
    node.api.pods = [honest, mps]
    node.give(honest, 3000)
    node.run(1001, honest, 3400)  # 3000 MiB quota + one context
    # The MPS server the nvidia-mps pod's control daemon started holds the shared context.
    node.run(1002, mps, 900, container_id="b" * 64, command="nvidia-cuda-mps-server")
    for now in (0, 10, 20, 30):
        assert node.enforcer.check(now=now) == []
    assert node.api.events == [] and node.api.evictions == []
    assert node.enforcer.latest.system == {GPUS[0].uuid: 900 * MIB}
    (seen,) = node.enforcer.latest.usages
    assert (container(seen.who).pod, seen.used_bytes) == ("honest", 3400 * MIB)


def test_sixty_small_processes_of_one_container_are_evicted_as_one_container(tmp_path: Path) -> None:
    """Issue 38 item 5, through the enforcer: 60 processes of 270 MiB on a 1000 MiB quota."""
    node = Node(tmp_path)
    pod = gpu_pod("swarm", 10, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 1000)
    for pid in range(5000, 5060):
        node.run(pid, pod, 270)
    assert node.enforcer.check(now=0) == []
    (violation,) = node.enforcer.check(now=10)
    assert (violation.used_bytes, violation.limit_bytes, violation.processes) == (16200 * MIB, 1512 * MIB, 60)
    assert node.api.evictions == [("team", "swarm")]


def test_a_graphics_process_is_charged_like_a_compute_one(tmp_path: Path) -> None:
    """Issue 38 item 3: a Vulkan or OpenGL process is in NVML's graphics list only, which was
    never read. The real NvmlBackend over a stand-in pynvml (no NVIDIA library here)."""
    node = Node(tmp_path)
    stand_in = StandInNvml(GPUS)
    node.enforcer.backend = nvml_backend(stand_in, GPUS)
    pod = gpu_pod("renderer", 10, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 1000)
    cgroup_of(node.proc, 4242, pod, CID, command="vkcube --headless")
    stand_in.processes[GPUS[0].uuid]["graphics"][4242] = 5000
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "renderer" and violation.used_bytes == 5000 * MIB
    assert node.api.evictions == [("team", "renderer")]


def test_a_pod_without_units_holding_gpu_memory_is_evicted_after_the_grace(tmp_path: Path) -> None:
    """Issue 28 finding 2: its quota is 0, and no context allowance applies to nothing."""
    node = Node(tmp_path)
    rogue = gpu_pod("rogue", 0, container_id=CID)
    node.api.pods = [rogue]
    node.run(4242, rogue, 200)
    assert node.enforcer.check(now=0) == []
    (violation,) = node.enforcer.check(now=10)
    assert (container(violation.who).pod, violation.quota_bytes, violation.limit_bytes) == ("rogue", 0, 0)
    ((name, reason, message),) = node.api.events
    assert (name, reason) == ("rogue", "GPUMemoryOverQuota")
    assert "holds 200 MiB of GPU memory" in message and "no GPU-memory quota" in message
    assert node.api.evictions == [("team", "rogue")]


def test_a_sidecar_without_units_in_a_gpu_pod_is_a_violation_of_its_pod(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    pod["spec"]["containers"].append({"name": "sidecar"})
    pod["status"]["containerStatuses"].append({"name": "sidecar", "containerID": f"containerd://{'c' * 64}"})
    node.api.pods = [pod]
    node.give(pod, 3000)
    node.run(4242, pod, 1000)  # the GPU container, well within its quota
    node.run(4343, pod, 600, container_id="c" * 64)
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert (container(violation.who).container, violation.used_bytes) == ("sidecar", 600 * MIB)
    assert node.api.evictions == [("team", "trainer")]


def test_a_process_in_a_child_cgroup_of_its_container_is_still_its_containers(tmp_path: Path) -> None:
    """Issue 28 finding 2: with a writable cgroupfs a process can move into a cgroup it made below
    its container's; the path's last part then names no container."""
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 3000)
    node.run(4242, pod, 4000, child="escape")
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "trainer" and violation.used_bytes == 4000 * MIB
    assert node.api.evictions == [("team", "trainer")]


def test_a_host_process_outside_kubernetes_is_reported_with_its_pid_and_command(tmp_path: Path) -> None:
    node = Node(tmp_path)
    host_process(node.proc, 777, "/user.slice/user-1000.slice/session-3.scope", "python3 mine.py --big")
    node.backend.process_mib[GPUS[0].uuid][777] = 2048
    assert node.enforcer.check(now=0) == []
    (violation,) = node.enforcer.check(now=10)
    assert violation.who == HostProcess(777, "python3 mine.py --big")
    message = violation.describe()
    assert "process 777 (python3 mine.py --big) outside Kubernetes holds 2048 MiB" in message
    assert "cannot be evicted" in message
    ((node_name, reason, said),) = node.api.node_events
    assert (node_name, reason, said) == ("node-a", "GPUMemoryOverQuota", message)
    assert node.api.evictions == [] and node.enforcer.actions["unevictable"] == 1


def test_a_process_in_no_pod_cgroup_but_a_containers_pid_namespace_is_that_containers(tmp_path: Path) -> None:
    """A process that left its container's cgroup altogether (a host cgroupfs) is tied through its
    PID namespace, the one its container's other processes are in; the host's PID namespace, which
    every hostPID pod shares, ties nothing."""
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 3000)
    host_process(node.proc, 1, "/init.scope", "/sbin/init", pid_ns="pid:[4026531836]")
    cgroup_of(node.proc, 4000, pod, CID, command="sleep infinity")  # the container's init process
    (node.proc / "4000" / "ns").mkdir()
    (node.proc / "4000" / "ns" / "pid").symlink_to("pid:[4026532999]")
    host_process(node.proc, 4242, "/", "python3 escape.py", pid_ns="pid:[4026532999]")
    node.backend.process_mib[GPUS[0].uuid][4242] = 4000
    monitor_pod = gpu_pod("cgpu-monitor-abcde", 0, namespace="kube-system", container_id="d" * 64)
    node.api.pods.append(monitor_pod)
    cgroup_of(node.proc, 5000, monitor_pod, "d" * 64, command="cgpu-monitor")
    (node.proc / "5000" / "ns").mkdir()
    (node.proc / "5000" / "ns" / "pid").symlink_to("pid:[4026531836]")  # hostPID
    host_process(node.proc, 6000, "/", "python3 host.py", pid_ns="pid:[4026531836]")
    node.backend.process_mib[GPUS[0].uuid][6000] = 100
    node.enforcer.check(now=0)
    violations = node.enforcer.check(now=10)
    assert sorted(str(v.who) for v in violations) == ["host process 6000 (python3 host.py)", "team/trainer/main"]
    assert node.api.evictions == [("team", "trainer")]


def test_a_process_in_a_pod_the_api_does_not_list_here_is_reported_as_a_host_process(tmp_path: Path) -> None:
    node = Node(tmp_path)
    stranger = gpu_pod("static", 0, container_id=CID)  # e.g. a static pod: no API object of that UID
    node.run(4242, stranger, 100)
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert isinstance(violation.who, HostProcess) and stranger["metadata"]["uid"] in violation.who.where
    assert node.api.evictions == []


def test_nothing_is_judged_while_the_quotas_cannot_be_read(tmp_path: Path) -> None:
    """kubelet's PodResources away, or a container's quota file unreadable: no quota is known, so
    no container is taken for one without a quota."""
    node = Node(tmp_path, grace_seconds=0.0)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, None)
    node.run(4242, pod, 4000)
    assert node.enforcer.check(now=0) == []

    def kubelet_away() -> dict[tuple[str, str, str], int | None]:
        raise OSError("connection refused")

    node.enforcer.quotas = kubelet_away
    with pytest.raises(OSError):
        node.enforcer.check(now=1)
    assert node.api.evictions == [] and node.api.events == []


def test_a_tenant_pod_named_like_the_mps_daemon_gets_no_pass(tmp_path: Path) -> None:
    node = Node(tmp_path)
    fake = gpu_pod("nvidia-mps", 0, container_id=CID, container="nvidia-mps", labels=MPS_LABELS)  # namespace team
    node.api.pods = [fake]
    node.run(4242, fake, 500, command="nvidia-cuda-mps-server")
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "nvidia-mps" and node.api.evictions == [("team", "nvidia-mps")]


def test_a_claim_container_over_its_claims_quota_is_evicted_too(tmp_path: Path) -> None:
    """vgpu_scheduling dra: the pod asks for no units; its quota is its claim's (from kubelet's
    PodResources and the driver's quota file, which cgpu-monitor hands the enforcer)."""
    node = Node(tmp_path)
    claimer = gpu_pod("claimer", 0, container_id=CID)
    node.api.pods = [claimer]
    node.give(claimer, 3000)
    node.run(4242, claimer, 4000)
    assert node.enforcer.check(now=0) == []
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "claimer" and violation.quota_bytes == 3000 * MIB
    assert node.api.evictions == [("team", "claimer")]


def test_the_pods_of_one_shared_claim_over_its_one_quota_are_evicted_together(tmp_path: Path) -> None:
    """Issue 40 item 1, cgpu-monitor's side (defence in depth behind the DRA driver's refusal): 8
    pods on one 1000 MiB claim, 1400 MiB each; every one of them is evicted after the grace."""
    node = Node(tmp_path)
    pods = [gpu_pod(f"share-{n}", 0, container_id=f"{n:x}" * 64) for n in range(8)]
    node.api.pods = pods
    for n, pod in enumerate(pods):
        node.share(pod, "0123456789abcdef", 1000)
        node.run(4000 + n, pod, 1400, container_id=f"{n:x}" * 64)
    assert node.enforcer.check(now=0) == []
    due = node.enforcer.check(now=10)
    assert sorted(container(v.who).pod for v in due) == [f"share-{n}" for n in range(8)]
    assert sorted(node.api.evictions) == [("team", f"share-{n}") for n in range(8)]
    message = next(m for name, reason, m in node.api.events if name == "share-0")
    assert "11200 MiB together" in message and "quota of 1000 MiB" in message, message


def test_the_pods_of_one_shared_claim_within_its_quota_together_stay(tmp_path: Path) -> None:
    node = Node(tmp_path)
    pods = [gpu_pod(f"share-{n}", 0, container_id=f"{n:x}" * 64) for n in range(2)]
    node.api.pods = pods
    for n, pod in enumerate(pods):
        node.share(pod, "0123456789abcdef", 1000)
        node.run(4000 + n, pod, 500, container_id=f"{n:x}" * 64)
    assert node.enforcer.check(now=0) == [] and node.enforcer.check(now=30) == []
    assert node.api.evictions == []


GPU_FILES = ["nvidiactl", "nvidia0", "nvidia-uvm"]  # what a CUDA process holds open
MONITOR_LABELS = {"app.kubernetes.io/name": "cgpu-monitor"}


def forked_away(node: Node, pod: dict[str, Any], dead: int, keeper: int, mib: int) -> None:
    """A process of the pod allocated `mib` MiB, forked `keeper`, which keeps the driver's file
    descriptors, and exited: NVML still lists the memory under `dead`, which names no process."""
    node.backend.process_mib[GPUS[0].uuid][dead] = mib
    cgroup_of(node.proc, keeper, pod, CID, command="python3 keep.py")
    started(node.proc, keeper, 9000 + keeper, holds=GPU_FILES)


def bystanders(node: Node) -> dict[str, Any]:
    """An honest pod whose CUDA process NVML lists, and cgpu-monitor's own pod, whose NVML reader
    holds the GPU's files without memory: neither is a candidate for memory of an exited process."""
    honest = gpu_pod("honest", 30, container_id="b" * 64)
    node.give(honest, 3000)
    node.run(6000, honest, 2000, container_id="b" * 64)
    started(node.proc, 6000, 8000, holds=GPU_FILES)
    monitor_pod = gpu_pod(
        "cgpu-monitor-x1", 0, namespace="kube-system", container="cgpu-monitor", container_id="e" * 64,
        labels=MONITOR_LABELS,
    )  # fmt: skip
    cgroup_of(node.proc, 7000, monitor_pod, "e" * 64, command="cgpu-monitor")
    started(node.proc, 7000, 100, holds=["nvidiactl", "nvidia0"])
    node.api.pods += [honest, monitor_pod]
    return honest


def two_pods(
    node: Node, first_name: str = "first", second_name: str = "second"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two pods of 1000 MiB each: the first's container is CID, the second's "c" * 64."""
    first, second = gpu_pod(first_name, 10, container_id=CID), gpu_pod(second_name, 10, container_id="c" * 64)
    node.api.pods = [first, second]
    node.give(first, 1000)
    node.give(second, 1000)
    return first, second


def holds_unlisted(node: Node, pod: dict[str, Any], pid: int, start: int) -> None:
    """A process of `second`'s container (two_pods) holds the GPU's files with no NVML entry."""
    cgroup_of(node.proc, pid, pod, "c" * 64, command="python3 keep.py")
    started(node.proc, pid, start, holds=GPU_FILES)


def test_memory_under_exited_pids_is_charged_to_the_container_whose_processes_hold_the_gpu(tmp_path: Path) -> None:
    """Issue 38 item 2: after fork the child keeps the driver's file descriptors and the parent
    exits; NVML lists the memory under the dead PID until the child exits. The monitor filed it as
    a host process it could not evict, so the container took its quota again each round (3 x 600
    MiB on 1000). Such memory is the container's whose processes hold the GPU without an NVML
    entry of their own (fakes.started writes their /proc/<pid>/fd)."""
    node = Node(tmp_path)
    forker = gpu_pod("forker", 10, container_id=CID)
    node.api.pods = [forker]
    node.give(forker, 1000)
    bystanders(node)
    for dead, keeper in ((4242, 5001), (4243, 5002), (4244, 5003)):
        forked_away(node, forker, dead, keeper, 600)
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "forker" and violation.used_bytes == 1800 * MIB
    assert "1800 MiB of it listed under processes that exited" in violation.describe()
    assert node.api.evictions == [("team", "forker")] and node.api.node_events == []


def test_a_pid_reused_by_an_innocent_process_is_never_blamed(tmp_path: Path) -> None:
    """Issue 38 item 2: NVML lists 5730 MiB under PID 4242, whose process exited; 4242 now names
    a process of another pod that holds no GPU file. It used to be blamed and its pod evicted."""
    node = Node(tmp_path)
    forker, innocent = two_pods(node, "forker", "innocent")
    forked_away(node, forker, 4242, 5001, 5730)
    cgroup_of(node.proc, 4242, innocent, "c" * 64, command="sleep 600")
    started(node.proc, 4242, 99999)  # the PID's new process: no GPU file
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "forker"
    assert node.api.evictions == [("team", "forker")]


def test_a_pid_seen_alive_then_reused_is_told_apart_by_its_start_time(tmp_path: Path) -> None:
    """The monitor saw PID 4242 as the forker's process (start time 1000, holding the GPU); it
    exited, and 4242 was reused by a process of another pod that opens the GPU too (nvidia-smi,
    start time 2000). The entry stays the forker's: a PID and its start time name one process."""
    node = Node(tmp_path)
    forker, innocent = two_pods(node, "forker", "innocent")
    node.run(4242, forker, 800)
    started(node.proc, 4242, 1000, holds=GPU_FILES)
    assert node.enforcer.check(now=0) == []  # 800 MiB on 1000: fine
    cgroup_of(node.proc, 4242, innocent, "c" * 64, command="nvidia-smi")
    started(node.proc, 4242, 2000, holds=["nvidiactl", "nvidia0"])
    forked_away(node, forker, 4300, 5001, 800)  # a second round
    node.enforcer.check(now=5)
    (violation,) = node.enforcer.check(now=15)
    assert container(violation.who).pod == "forker" and violation.used_bytes == 1600 * MIB
    assert node.api.evictions == [("team", "forker")]


def test_memory_the_gpu_holds_beyond_every_listed_process_is_charged_to_its_one_holder(tmp_path: Path) -> None:
    """Issue 38 item 2, reconciliation: what the device reports used beyond all NVML entries is
    charged, above a small tolerance, to the one container whose processes hold the GPU unlisted."""
    node = Node(tmp_path, unattributed_tolerance_mib=256)
    hidden = gpu_pod("hidden", 10, container_id=CID)
    node.api.pods = [hidden]
    node.give(hidden, 1000)
    bystanders(node)
    cgroup_of(node.proc, 5001, hidden, CID, command="./raw-ioctls")
    started(node.proc, 5001, 4000, holds=GPU_FILES)
    node.backend.used_mib[GPUS[0].uuid] = 2000 + 5000  # the honest pod's 2000 MiB and 5000 no entry names
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "hidden" and violation.used_bytes == 5000 * MIB
    assert node.api.evictions == [("team", "hidden")]


def test_memory_no_container_can_be_tied_to_is_exported_and_reported_on_the_node(short_tmp: Path) -> None:
    """Issue 38 item 2: memory of an exited PID whose holder is no container's (a process on the
    host), and memory no entry names while two containers hold the GPU unlisted, is nobody's the
    monitor can prove: vgpu_gpu_memory_unattributed_bytes, an Event on the node, no eviction."""
    exporter = Exporter(short_tmp)
    try:
        node = Node(short_tmp, unattributed_tolerance_mib=256)
        exporter.collector.enforcer = node.enforcer
        first, second = two_pods(node)
        node.backend.process_mib[GPUS[0].uuid][4242] = 3000  # exited
        host_process(node.proc, 800, "/system.slice/keeper.service", "/usr/local/bin/keeper")
        started(node.proc, 800, 10, holds=GPU_FILES)
        node.backend.used_mib[GPUS[0].uuid] = 3000
        node.enforcer.check(now=0)
        node.enforcer.check(now=10)
        assert node.api.evictions == [] and node.api.events == []
        ((_node, reason, message),) = node.api.node_events
        assert reason == "GPUMemoryUnattributed" and "3000 MiB" in message and "PID 4242" in message
        assert "fuser -v /dev/nvidia*" in message
        assert value(exporter.scrape(), "vgpu_gpu_memory_unattributed_bytes", UUID=GPUS[0].uuid) == 3000 * MIB
        # 2000 MiB more that no entry names, while both pods hold the GPU unlisted: still nobody's.
        for pid, pod, cid in ((5001, first, CID), (5002, second, "c" * 64)):
            cgroup_of(node.proc, pid, pod, cid)
            started(node.proc, pid, 9000, holds=GPU_FILES)
        node.backend.used_mib[GPUS[0].uuid] = 5000
        node.enforcer.check(now=20)
        node.enforcer.check(now=60)
        assert node.api.evictions == [] and len(node.api.node_events) == 1  # one Event while it lasts
        assert value(exporter.scrape(), "vgpu_gpu_memory_unattributed_bytes", UUID=GPUS[0].uuid) == 5000 * MIB
    finally:
        exporter.stop()


def test_memory_two_containers_may_hold_is_reported_with_the_pids_that_hold_the_gpu(tmp_path: Path) -> None:
    """Two pods with fork orphans at once: the memory under the exited PIDs cannot be split
    between them, so it stays unattributed; the node's Event names each container with the PIDs
    that hold the GPU without an entry, the processes an operator looks at on the node (on the
    H200 on 2026-12-05 it named an innocent pod beside forker, and nothing said which process)."""
    node = Node(tmp_path)
    first, second = two_pods(node)
    forked_away(node, first, 4242, 5001, 600)
    forked_away(node, first, 4243, 5003, 600)
    node.backend.process_mib[GPUS[0].uuid][4244] = 600
    holds_unlisted(node, second, 5002, 9100)
    node.enforcer.check(now=0)
    node.enforcer.check(now=10)
    assert node.api.evictions == []
    ((_node, reason, message),) = node.api.node_events
    assert reason == "GPUMemoryUnattributed", message
    assert "team/first/main (PID 5001, 5003)" in message and "team/second/main (PID 5002)" in message, message


def test_a_gpu_whose_used_memory_cannot_be_read_is_still_judged_by_its_processes(tmp_path: Path) -> None:
    """The reconciliation reads each GPU's used memory; when NVML fails that call (a GPU fallen off
    the bus, a driver without it), the processes' memory is still judged and nothing is charged
    from a gap that cannot be known."""
    node = Node(tmp_path)
    pod = gpu_pod("trainer", 30, container_id=CID)
    node.api.pods = [pod]
    node.give(pod, 3000)
    node.run(4242, pod, 4000)

    def no_memory(uuid: str) -> nvml.Memory:
        raise RuntimeError(f"NVML: GPU {uuid} is lost")

    node.backend.memory = no_memory
    node.enforcer.check(now=0)
    (violation,) = node.enforcer.check(now=10)
    assert container(violation.who).pod == "trainer" and node.enforcer.latest.unattributed == {}


def test_the_monitor_exports_the_ground_truth(short_tmp: Path) -> None:
    exporter = Exporter(short_tmp)
    try:
        node = Node(short_tmp)
        pod = gpu_pod("trainer", 30, container_id=CID)
        mps = gpu_pod(
            "nvidia-mps-x7k2p", 0, namespace="kube-system", container="nvidia-mps", container_id="b" * 64,
            labels=MPS_LABELS,
        )  # fmt: skip
        node.api.pods = [pod, mps]
        node.give(pod, 3000)
        node.run(4242, pod, 4000)
        node.run(31, mps, 32, container_id="b" * 64, command="/usr/bin/nvidia-cuda-mps-server")
        node.backend.process_mib[GPUS[1].uuid][31] = node.backend.process_mib[GPUS[0].uuid].pop(31)
        host_process(node.proc, 9, "/system.slice/miner.service", "/opt/miner --all")
        node.backend.process_mib[GPUS[1].uuid][9] = 64
        exporter.collector.enforcer = node.enforcer
        node.enforcer.check(now=0)
        node.enforcer.check(now=12)
        metrics = exporter.scrape()
        labels = {"namespace": "team", "pod": "trainer", "container": "main", "UUID": GPUS[0].uuid, "gpu": "0"}
        assert value(metrics, "vgpu_container_memory_real_bytes", **labels) == 4000 * MIB
        assert value(metrics, "vgpu_container_memory_limit_bytes", **labels) == 3512 * MIB
        assert value(metrics, "vgpu_container_over_quota_seconds", **labels) == 12
        host = {"pid": "9", "command": "/opt/miner --all", "UUID": GPUS[1].uuid, "gpu": "1"}
        assert value(metrics, "vgpu_host_process_memory_bytes", **host) == 64 * MIB
        assert value(metrics, "vgpu_host_process_over_quota_seconds", **host) == 12
        assert value(metrics, "vgpu_gpu_memory_system_bytes", UUID=GPUS[1].uuid) == 32 * MIB
        assert value(metrics, "vgpu_gpu_memory_system_bytes", UUID=GPUS[0].uuid) == 0
        assert value(metrics, "vgpu_quota_violations_total", action="evicted") == 1
        assert value(metrics, "vgpu_quota_violations_total", action="unevictable") == 1
        assert "vgpu_gpu_memory_unaccounted_bytes" not in metrics  # every byte is someone's
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


def test_a_pod_starting_beside_fork_orphans_is_a_candidate_only_until_its_entry_shows(tmp_path: Path) -> None:
    """The H200 run of 2026-12-05: the innocent pod's process had opened the GPU 2 s before the
    monitor's check and NVML did not list it yet, so the first check named it beside forker and
    charged nobody. Once its entry shows, forker is the one holder and is charged."""
    node = Node(tmp_path)
    forker, innocent = two_pods(node, "forker", "innocent")
    for dead, keeper in ((4242, 5001), (4243, 5002), (4244, 5003)):
        forked_away(node, forker, dead, keeper, 1118)
    cgroup_of(node.proc, 4242, innocent, "c" * 64, command="sleep 600")
    started(node.proc, 4242, 99999)  # the reused PID: no GPU file
    cgroup_of(node.proc, 6000, innocent, "c" * 64, command="vgpu-memory-usage 300 600")
    started(node.proc, 6000, 8000, holds=GPU_FILES)  # its context not yet listed by NVML
    node.enforcer.check(now=0)
    assert node.api.evictions == []
    ((_node, _reason, message),) = node.api.node_events
    assert "team/forker/main (PID 5001, 5002, 5003)" in message and "team/innocent/main (PID 6000)" in message
    node.backend.process_mib[GPUS[0].uuid][6000] = 818  # NVML lists it now
    node.enforcer.check(now=5)
    node.enforcer.check(now=20)
    assert node.api.evictions == [("team", "forker")]


def test_the_monitors_own_process_is_never_a_pods_where_pid_1s_namespace_cannot_be_read(tmp_path: Path) -> None:
    """The H200 run of 2026-12-05 (second try): the backstop test moves a host process (in the
    host's PID namespace) into the innocent pod's cgroup, and PID 1's namespace link could not be
    read. The host's namespace then tied every process whose cgroup names no pod to the innocent
    pod, cgpu-monitor's own (hostPID, its cgroup "/" in its own cgroup namespace, holding the GPU
    to read NVML) among them: named beside forker as a holder, so forker's fork orphans stayed
    unattributed. The monitor's own namespace is the host's too."""
    node = Node(tmp_path)
    forker, innocent = two_pods(node, "forker", "innocent")
    for dead, keeper in ((4242, 5001), (4243, 5002), (4244, 5003)):
        forked_away(node, forker, dead, keeper, 1118)
    host_ns = "pid:[4026531836]"
    host_process(node.proc, 1, "/", "/sbin/init")  # no ns link: it cannot be read
    cgroup_of(node.proc, 7000, innocent, "c" * 64, command="sleep 600")  # a host process moved in
    (node.proc / "7000" / "ns").mkdir()
    (node.proc / "7000" / "ns" / "pid").symlink_to(host_ns)
    host_process(node.proc, 6000, "/", "python3 /usr/local/bin/cgpu-monitor", pid_ns=host_ns)  # itself
    started(node.proc, 6000, 8000, holds=GPU_FILES)
    (node.proc / "self").symlink_to("6000")
    node.enforcer.check(now=0)
    node.enforcer.check(now=20)
    assert node.api.evictions == [("team", "forker")]
    assert not any("innocent" in message for _node, _reason, message in node.api.node_events)


def test_memory_left_unattributed_is_logged_again_when_what_the_monitor_finds_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One Event per gap, but the log follows it: when the candidates change while the memory
    stays unattributed, a line says what the check found now (on the H200 the one Event was
    written 2 s after a pod started, and nothing showed what the next 150 s of checks saw)."""
    node = Node(tmp_path)
    first, second = two_pods(node)
    forked_away(node, first, 4242, 5001, 600)
    node.backend.process_mib[GPUS[0].uuid][4243] = 600
    holds_unlisted(node, second, 5002, 9100)
    with caplog.at_level(logging.WARNING, logger="vgpu.monitor"):
        node.enforcer.check(now=0)
        node.enforcer.check(now=5)  # the same: no new line
        holds_unlisted(node, second, 5003, 9200)
        node.enforcer.check(now=10)
    lines = [r.getMessage() for r in caplog.records if "held by no container" in r.getMessage()]
    assert len(lines) == 2 and len(node.api.node_events) == 1, lines
    assert "still unattributed" in lines[1] and "team/second/main (PID 5002, 5003)" in lines[1], lines
