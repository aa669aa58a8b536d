"""cgpu-monitor's backstop against a tenant who knows its rules (issue 38), against the real API
server: each pattern of the adversarial review, and the pod it must (and must not) stop.

The pods are real API objects bound to kwok nodes (or, where the kubelet's side matters, to a node
no kubelet runs); the GPU side cannot run here (no GPU, no kubelet), so NVML is the component
tests' FakeGpus and /proc a folder of the processes' files (fakes.host_process).
tests/gpu/kubelet/backstop.sh runs the same patterns through the real kubelet on the H200.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from fakes import GPUS, FakeGpus, StandInNvml, cgroup_of, nvml_backend, started
from kubernetes import client
from vgpu_components import config, kube, nvml
from vgpu_components.enforcement import Enforcer

from tests.k8s import cluster
from tests.k8s.test_monitor_enforcement import events, gone, running_gpu_pod

MIB = 1024 * 1024


class Monitor:
    """cgpu-monitor's enforcement on one node, with the real API client and fake NVML and /proc."""

    def __init__(self, tmp: Path, node: str, backend: nvml.GpuBackend | None = None, **monitor: Any) -> None:
        cfg = config.load(None, environ={})
        cfg["monitor"].update({"grace_seconds": 1.0, **monitor})
        self.proc = tmp / "proc"
        self.proc.mkdir(parents=True, exist_ok=True)
        self.backend = backend if backend is not None else FakeGpus(GPUS)
        self.quotas: dict[tuple[str, str, str], int | None] = {}
        pods = kube.KubePodApi(cluster.api_client(), "cgpu-monitor", node)
        self.enforcer = Enforcer(cfg, node, self.backend, pods, self.proc, quotas=lambda: self.quotas)

    def give(self, pod: dict[str, Any], mib: int) -> None:
        """The pod's container `main` has a quota file of `mib` MiB."""
        self.quotas[(pod["metadata"]["namespace"], pod["metadata"]["name"], "main")] = mib * MIB

    def run(self, pid: int, pod: dict[str, Any], mib: int, container_id: str = "") -> str:
        """Process `pid` of the pod's container (kwok reports no container IDs) holds `mib` MiB."""
        container_id = container_id or uuid.uuid4().hex * 2
        cgroup_of(self.proc, pid, pod, container_id)
        assert isinstance(self.backend, FakeGpus)
        self.backend.process_mib[GPUS[0].uuid][pid] = mib
        return container_id


def test_sixty_small_contexts_of_one_pod_are_evicted(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Item 5: 60 processes of 270 MiB on a 3000 MiB quota (16200 MiB) stayed under the old limit
    of 3000 + 60 x 512 MiB; the allowance is now one per container."""
    pod = running_gpu_pod(core, namespace, "swarm", gpu_nodes(1))
    monitor = Monitor(tmp_path, pod["spec"]["nodeName"])
    monitor.give(pod, 3000)
    container_id = monitor.run(5000, pod, 270)
    for pid in range(5001, 5060):
        monitor.run(pid, pod, 270, container_id)
    monitor.enforcer.check(now=0)
    (violation,) = monitor.enforcer.check(now=1)
    assert violation.used_bytes == 16200 * MIB and violation.limit_bytes == 3512 * MIB
    ((reason, message),) = events(core, namespace, "swarm")
    assert reason == "GPUMemoryOverQuota" and "holds 16200 MiB" in message and "60 process(es)" in message
    cluster.wait_for("the swarm evicted", lambda: gone(core, namespace, "swarm"), timeout=30)


def test_a_pod_over_its_quota_most_of_the_time_is_evicted(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Item 4: over 24 s of every 30 with a 30 s grace; each check under the limit reset the
    timer, so the pod was never acted on. Checks every second, the monitor's clock given."""
    pod = running_gpu_pod(core, namespace, "oscillating", gpu_nodes(1))
    monitor = Monitor(tmp_path, pod["spec"]["nodeName"], grace_seconds=30.0)
    monitor.give(pod, 3000)
    monitor.run(4242, pod, 4000)
    assert isinstance(monitor.backend, FakeGpus)
    held = monitor.backend.process_mib[GPUS[0].uuid]
    acted = None
    for now in range(120):
        held[4242] = 4000 if now % 30 < 24 else 2000
        if monitor.enforcer.check(now=now):
            acted = now
            break
    assert acted is not None, "never acted on"
    assert [r for r, _m in events(core, namespace, "oscillating")] == ["GPUMemoryOverQuota"]
    cluster.wait_for("the oscillating pod evicted", lambda: gone(core, namespace, "oscillating"), timeout=30)


def unmanaged_node(core: Any) -> str:
    """A node no kubelet (and no kwok) runs: a pod bound to it is never confirmed stopped, as a
    pod whose PID 1 ignores SIGTERM is not until its grace period ends."""
    name = f"no-kubelet-{uuid.uuid4().hex[:8]}"
    body = cluster.node_body(name, [cluster.GPU_12GIB], {})
    del body["metadata"]["annotations"]["kwok.x-k8s.io/node"]
    core.create_node(body)
    return name


def test_a_pod_that_outwaits_its_eviction_is_gone_within_the_bound(core: Any, namespace: str, tmp_path: Path) -> None:
    """Item 1: deleted with its own grace period (a year) and never acted on again, the pod kept
    its memory. The monitor caps the grace (termination_grace_seconds) and, still over at the first
    check that long after, deletes it at once: the API object is gone (kubelet kills what is left)."""
    node = unmanaged_node(core)
    try:
        body = cluster.pod_body("holdout", 1000, {})
        body["spec"].update(nodeName=node, terminationGracePeriodSeconds=365 * 24 * 3600)
        core.create_namespaced_pod(namespace, body)
        pod: dict[str, Any] = core.api_client.sanitize_for_serialization(core.read_namespaced_pod("holdout", namespace))
        monitor = Monitor(tmp_path, node, termination_grace_seconds=5)
        monitor.give(pod, 1000)
        monitor.run(4242, pod, 40000)
        monitor.enforcer.check(now=0)
        monitor.enforcer.check(now=1)
        terminating = core.read_namespaced_pod("holdout", namespace).metadata
        assert terminating.deletion_timestamp is not None and terminating.deletion_grace_period_seconds == 5
        monitor.enforcer.check(now=6)
        cluster.wait_for("the holdout pod gone from the API", lambda: absent(core, namespace, "holdout"), timeout=30)
        reasons = [r for r, _m in events(core, namespace, "holdout")]
        assert reasons == ["GPUMemoryOverQuota", "GPUMemoryOverQuota"], reasons
    finally:
        core.delete_node(node)


def absent(core: Any, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def test_a_pod_whose_vulkan_process_holds_memory_is_evicted(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Item 3: NVML's graphics list was never read, so a Vulkan or OpenGL process was invisible.
    The real NvmlBackend over a stand-in pynvml (no NVIDIA library here)."""
    pod = running_gpu_pod(core, namespace, "renderer", gpu_nodes(1))
    stand_in = StandInNvml(GPUS)
    monitor = Monitor(tmp_path, pod["spec"]["nodeName"], nvml_backend(stand_in, GPUS))
    monitor.give(pod, 3000)
    cgroup_of(monitor.proc, 4242, pod, uuid.uuid4().hex * 2, command="vkcube --headless")
    stand_in.processes[GPUS[0].uuid]["graphics"][4242] = 9000
    monitor.enforcer.check(now=0)
    (violation,) = monitor.enforcer.check(now=1)
    assert violation.used_bytes == 9000 * MIB
    cluster.wait_for("the renderer evicted", lambda: gone(core, namespace, "renderer"), timeout=30)


GPU_FILES = ["nvidiactl", "nvidia0", "nvidia-uvm"]


def test_the_pod_whose_children_keep_an_exited_process_memory_is_evicted_and_no_one_else(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Item 2: NVML lists memory under PIDs whose processes exited (forked children keep the
    driver's file descriptors); one of the PIDs now names a process of an innocent pod. The pod
    whose processes hold the GPU is evicted, named in its Event; the innocent pod is untouched."""
    selector = gpu_nodes(1)
    forker = running_gpu_pod(core, namespace, "forker", selector)
    innocent = running_gpu_pod(core, namespace, "innocent", selector)
    monitor = Monitor(tmp_path, forker["spec"]["nodeName"])
    monitor.give(forker, 3000)
    monitor.give(innocent, 3000)
    assert isinstance(monitor.backend, FakeGpus)
    forker_id = uuid.uuid4().hex * 2
    for dead, keeper in ((4242, 5001), (4243, 5002)):
        monitor.backend.process_mib[GPUS[0].uuid][dead] = 2000
        cgroup_of(monitor.proc, keeper, forker, forker_id, command="vgpu-memory-usage 2000 3600 --fork-orphan")
        started(monitor.proc, keeper, 50000 + keeper, holds=GPU_FILES)
    cgroup_of(monitor.proc, 4242, innocent, uuid.uuid4().hex * 2, command="sleep 3600")
    started(monitor.proc, 4242, 99999)
    monitor.enforcer.check(now=0)
    (violation,) = monitor.enforcer.check(now=1)
    assert str(violation.who) == f"{namespace}/forker/main" and violation.used_bytes == 4000 * MIB
    ((reason, message),) = events(core, namespace, "forker")
    assert reason == "GPUMemoryOverQuota" and "listed under processes that exited" in message
    cluster.wait_for("the forker evicted", lambda: gone(core, namespace, "forker"), timeout=30)
    assert events(core, namespace, "innocent") == []
    assert core.read_namespaced_pod("innocent", namespace).metadata.deletion_timestamp is None


def test_memory_no_container_can_be_tied_to_is_an_event_on_the_node(
    core: Any, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Item 2, reconciliation: memory the GPU reports used that no NVML entry names, with no
    container holding the GPU unlisted, is reported on the node (Event GPUMemoryUnattributed)."""
    node = core.list_node(label_selector=",".join(f"{k}={v}" for k, v in gpu_nodes(1).items())).items[0].metadata.name
    monitor = Monitor(tmp_path, node)
    assert isinstance(monitor.backend, FakeGpus)
    monitor.backend.used_mib[GPUS[0].uuid] = 6000
    monitor.enforcer.check(now=0)
    found = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.kind=Node,involvedObject.name={node},reason=GPUMemoryUnattributed"
    ).items
    (event,) = [e for e in found if e.source and e.source.component == "cgpu-monitor"]
    assert "6000 MiB" in (event.message or "")
