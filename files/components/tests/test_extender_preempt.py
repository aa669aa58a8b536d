"""The extender's preempt verb over real HTTP, with bodies shaped like kube-scheduler's.

kube-scheduler (nodeCacheCapable: true) POSTs ExtenderPreemptionArgs {"Pod",
"NodeNameToMetaVictims": {node: {"Pods": [{"UID"}], "NumPDBViolations"}}} and reads back
ExtenderPreemptionResult {"NodeNameToMetaVictims"}. The API server is FakeClusterApi (no
kube-apiserver in unit tests; tests/k8s/test_preemption.py runs the real kube-scheduler).
"""

from __future__ import annotations

from typing import Any

from fakes import GPU0, GPU1, Scheduler, pod_obj

PATH = "/gpushare-scheduler/preempt"


def fill(cluster: Scheduler, priority: int = 0, labels: dict[str, str] | None = None) -> dict[str, str]:
    """Four pods of 4800 MiB, two per GPU (the issue's worker A): name -> GPU uuid."""
    placed = {}
    for name in ("low-0", "low-1", "low-2", "low-3"):
        pod = pod_obj(name, 4800)
        pod["spec"]["priority"] = priority
        pod["metadata"]["labels"] = dict(labels or {})
        placed[name] = cluster.schedule(pod, ["gpu-a"])[1]["vgpu.io/gpu-uuid"]
    return placed


def preempt_args(pod: dict[str, Any], victims: dict[str, list[str]]) -> dict[str, Any]:
    """As kube-scheduler sends them: its own node-level victims per candidate node."""
    return {
        "Pod": pod,
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": 0} for node, uids in victims.items()
        },
    }


def high(mib: int = 8000, priority: int = 1000) -> dict[str, Any]:
    pod = pod_obj("high", mib)
    pod["spec"]["priority"] = priority
    return pod


def test_the_victims_are_the_pods_of_one_gpu_not_kube_schedulers_node_level_pick(cluster: Scheduler) -> None:
    placed = fill(cluster)
    assert sorted(placed.values()) == sorted([GPU0, GPU0, GPU1, GPU1])
    # kube-scheduler picks one victim: 4800 MiB frees the node's 8000 MiB at node level.
    status, result = cluster.post(PATH, preempt_args(high(), {"gpu-a": ["uid-low-0"]}))
    assert status == 200
    victims = result["NodeNameToMetaVictims"]["gpu-a"]
    uids = {v["UID"] for v in victims["Pods"]}
    assert len(uids) == 2
    (gpu,) = {placed[uid.removeprefix("uid-")] for uid in uids}
    assert victims["NumPDBViolations"] == 0
    assert cluster.api.node_reads == ["gpu-a"]  # judged from the node's pods as the API lists them now
    assert gpu in (GPU0, GPU1)


def test_equal_priority_is_never_a_victim_and_the_node_is_dropped(cluster: Scheduler) -> None:
    fill(cluster, priority=1000)
    status, result = cluster.post(PATH, preempt_args(high(), {"gpu-a": ["uid-low-0"]}))
    assert status == 200
    assert result == {"NodeNameToMetaVictims": {}}


def test_the_pods_events_say_why_no_gpu_can_be_freed_once_per_reason(cluster: Scheduler) -> None:
    """kube-scheduler's own event says only that no node was left; the extender's says why."""
    fill(cluster, priority=1000)
    for _attempt in range(3):  # kube-scheduler retries the pod: one event while the reason stands
        cluster.post(PATH, preempt_args(high(), {"gpu-a": ["uid-low-0"]}))
    ((pod, reason, message),) = cluster.api.pod_events
    assert (pod, reason) == ("default/high", "PreemptionFreesNoGPU")
    assert message == (
        "no GPU can be freed for this pod by evicting pods of lower priority: gpu-a: evicting pods of priority "
        "below 1000 frees 8000 MiB on no GPU: GPU 0 would still be 5400 MiB short after evicting its 0 pod(s) "
        "of lower priority; GPU 1 would still be 5400 MiB short after evicting its 0 pod(s) of lower priority"
    )


def test_nodes_without_gpus_or_unknown_are_dropped_and_a_pod_without_gpu_memory_preempts_nothing(
    cluster: Scheduler,
) -> None:
    fill(cluster)
    status, result = cluster.post(PATH, preempt_args(high(), {"cpu-b": ["x"], "gone": ["y"]}))
    assert (status, result) == (200, {"NodeNameToMetaVictims": {}})
    status, result = cluster.post(PATH, preempt_args(pod_obj("cpu", None), {"gpu-a": ["uid-low-0"]}))
    assert (status, result) == (200, {"NodeNameToMetaVictims": {}})


def test_the_full_victims_form_is_read_too(cluster: Scheduler) -> None:
    """Without nodeCacheCapable kube-scheduler sends NodeNameToVictims with whole pods."""
    fill(cluster)
    args = {"Pod": high(), "NodeNameToVictims": {"gpu-a": {"Pods": [pod_obj("low-0", 4800)], "NumPDBViolations": 0}}}
    status, result = cluster.post(PATH, args)
    assert status == 200 and len(result["NodeNameToMetaVictims"]["gpu-a"]["Pods"]) == 2


def test_a_disruption_budget_with_no_disruption_left_steers_the_victims_and_is_counted(cluster: Scheduler) -> None:
    placed = fill(cluster)
    on_gpu0 = sorted(name for name, gpu in placed.items() if gpu == GPU0)
    for name in on_gpu0:  # the pods of GPU 0 are guarded by a budget that allows no disruption
        cluster.api.pods[("default", name)]["metadata"]["labels"] = {"app": "guarded"}
    cluster.api.budgets = [budget("guard", {"app": "guarded"}, allowed=0)]
    status, result = cluster.post(PATH, preempt_args(high(), {"gpu-a": ["uid-low-0"]}))
    victims = result["NodeNameToMetaVictims"]["gpu-a"]
    assert {v["UID"].removeprefix("uid-") for v in victims["Pods"]} == set(placed) - set(on_gpu0)
    assert victims["NumPDBViolations"] == 0
    # Every pod guarded: a set is still chosen and its violations counted as kube-scheduler does
    # (one disruption allowed: the second victim the budget selects violates it).
    for name in placed:
        cluster.api.pods[("default", name)]["metadata"]["labels"] = {"app": "guarded"}
    cluster.api.budgets = [budget("guard", {"app": "guarded"}, allowed=1)]
    status, result = cluster.post(PATH, preempt_args(high(), {"gpu-a": ["uid-low-0"]}))
    assert status == 200 and result["NodeNameToMetaVictims"]["gpu-a"]["NumPDBViolations"] == 1


def test_malformed_preemption_args_get_400(cluster: Scheduler) -> None:
    status, result = cluster.post(PATH, {"Pod": high(), "NodeNameToMetaVictims": ["gpu-a"]})
    assert status == 400 and "must map node names to victims" in str(result)


def budget(name: str, labels: dict[str, str], allowed: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": {"matchLabels": labels}},
        "status": {"disruptionsAllowed": allowed},
    }


def test_an_api_that_does_not_answer_preempts_nothing_and_says_why(cluster: Scheduler) -> None:
    """kube-scheduler then preempts nothing for this attempt and retries the pod after its backoff."""
    fill(cluster)
    cluster.api.fail_reads = True
    status, result = cluster.post(PATH, preempt_args(high(), {"gpu-a": ["uid-low-0"]}))
    assert status == 500 and "the API server is unavailable" in result["Error"], result
