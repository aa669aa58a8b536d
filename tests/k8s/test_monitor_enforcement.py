"""cgpu-monitor's ground-truth enforcement against the real API server: the Event, the eviction
(the pod deleted, as kubelet evicts one over its ephemeral-storage limit), which a
PodDisruptionBudget does not stop, and report mode, which evicts nothing. That only its own node's
pods can be evicted with the monitor's identity is tests/k8s/test_stack.py's (the role's policy).

The pods are real API objects bound by kube-scheduler through the extender to kwok nodes; the
GPU side cannot run here (no GPU, no kubelet), so NVML is the component tests' FakeGpus
reporting a process of the pod over its quota, and /proc is a folder with that process's cgroup.
tests/gpu/ground_truth.sh runs the detection against the real driver.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from fakes import GPUS, FakeGpus, cgroup_of
from kubernetes import client
from vgpu_components import config, kube
from vgpu_components.enforcement import Enforcer

from tests.k8s import cluster

MIB = 1024 * 1024


def running_gpu_pod(core: Any, namespace: str, name: str, selector: dict[str, str]) -> dict[str, Any]:
    """A 3000 MiB pod, bound through the extender and marked Running by kwok, as raw JSON."""
    body = cluster.pod_body(name, 3000, selector, labels={"app": name})
    core.create_namespaced_pod(namespace, body)
    cluster.wait_bound(core, namespace, name)
    cluster.wait_for(
        f"{name} Running", lambda: core.read_namespaced_pod(name, namespace).status.phase == "Running", timeout=60
    )
    pod: dict[str, Any] = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, namespace))
    return pod


def enforcer_over_quota(tmp: Path, pod: dict[str, Any], enforcement: str) -> Enforcer:
    """An enforcer on the pod's node whose NVML shows a process of the pod holding 4000 MiB."""
    cfg = config.load(None, environ={})
    cfg["monitor"].update({"enforcement": enforcement, "grace_seconds": 1.0})
    node = pod["spec"]["nodeName"]
    backend = FakeGpus(GPUS)
    backend.process_mib[GPUS[0].uuid][4242] = 4000
    cgroup_of(tmp / "proc", 4242, pod, uuid.uuid4().hex * 2)  # kwok reports no container IDs
    pods = kube.KubePodApi(cluster.api_client(), "cgpu-monitor", node)
    quota = {(pod["metadata"]["namespace"], pod["metadata"]["name"], "main"): 3000 * MIB}  # its quota file's
    return Enforcer(cfg, node, backend, pods, tmp / "proc", quotas=lambda: quota)


def events(core: Any, namespace: str, name: str) -> list[tuple[str, str]]:
    found = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message or "") for e in found if e.source and e.source.component == "cgpu-monitor"]


def test_a_pod_over_its_quota_gets_an_event_and_is_evicted(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    pod = running_gpu_pod(core, namespace, "over", gpu_nodes(1))
    enforcer = enforcer_over_quota(tmp_path, pod, "evict")
    assert enforcer.check(now=0) == []
    (violation,) = enforcer.check(now=1)
    assert str(violation.who) == f"{namespace}/over/main" and violation.used_bytes == 4000 * MIB
    ((reason, message),) = events(core, namespace, "over")
    assert reason == "GPUMemoryOverQuota" and "holds 4000 MiB" in message and "quota of 3000 MiB" in message
    cluster.wait_for("the pod evicted", lambda: gone(core, namespace, "over"), timeout=30)


def gone(core: Any, namespace: str, name: str) -> bool:
    try:
        return core.read_namespaced_pod(name, namespace).metadata.deletion_timestamp is not None
    except client.ApiException as exc:
        return exc.status == 404


def test_report_mode_leaves_the_pod_running_and_a_disruption_budget_does_not_shield_one_over_its_quota(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Issue 28: a budget the tenant writes for its own pod made the eviction fail, again at every
    check, and the pod kept the GPU memory it took from its neighbours."""
    selector = gpu_nodes(1)
    reported = running_gpu_pod(core, namespace, "reported", selector)
    enforcer = enforcer_over_quota(tmp_path / "a", reported, "report")
    enforcer.check(now=0)
    assert len(enforcer.check(now=1)) == 1
    assert [r for r, _m in events(core, namespace, "reported")] == ["GPUMemoryOverQuota"]

    guarded = running_gpu_pod(core, namespace, "guarded", selector)
    policy = client.PolicyV1Api(core.api_client)
    budget: Any = {
        "metadata": {"name": "keep"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
    }
    policy.create_namespaced_pod_disruption_budget(namespace, budget)

    def budget_counts_the_pod() -> bool:
        status = policy.read_namespaced_pod_disruption_budget("keep", namespace).status
        return status is not None and (status.current_healthy or 0) >= 1

    cluster.wait_for("the budget to count the pod", budget_counts_the_pod, timeout=60)
    enforcer = enforcer_over_quota(tmp_path / "b", guarded, "evict")
    enforcer.check(now=0)
    enforcer.check(now=1)
    assert [r for r, _m in events(core, namespace, "guarded")] == ["GPUMemoryOverQuota"]
    cluster.wait_for("the guarded pod evicted", lambda: gone(core, namespace, "guarded"), timeout=30)
    assert core.read_namespaced_pod("reported", namespace).metadata.deletion_timestamp is None
