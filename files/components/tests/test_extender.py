"""The scheduler extender over real HTTP on 127.0.0.1, with bodies shaped like kube-scheduler's.

kube-scheduler (nodeCacheCapable: true) POSTs ExtenderArgs {"Pod", "Nodes": null, "NodeNames"}
to filter and prioritize, and ExtenderBindingArgs {"PodName", "PodNamespace", "PodUID", "Node"}
to bind. The API server is replaced by FakeClusterApi (no kube-apiserver in unit tests; tests/k8s
runs the extender against a real one): it records pod annotations and bindings and feeds the
list/watch the extender rebuilds its model from.
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Any

import pytest
from fakes import GPU0, GPU1, FakeClusterApi, Scheduler, node_obj, pod_obj
from vgpu_components.extender import start_background
from vgpu_components.extender_verbs import Extender
from vgpu_components.scheduling import ClusterModel, pod_record

from tests.polling import wait_for


@pytest.mark.parametrize("cluster", ["tightest", "weighted"], indirect=True)
def test_reference_scenario_big_pods_spread_small_pods_share(cluster: Scheduler) -> None:
    """2 x 12 GiB: two 8000 MiB pods land on different GPUs, two 2000 MiB pods on the same GPU."""
    big1 = cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])[1]
    big2 = cluster.schedule(pod_obj("big-2", 8000), ["gpu-a"])[1]
    assert {big1["vgpu.io/gpu-uuid"], big2["vgpu.io/gpu-uuid"]} == {GPU0, GPU1}
    small1 = cluster.schedule(pod_obj("small-1", 2000), ["gpu-a"])[1]
    small2 = cluster.schedule(pod_obj("small-2", 2000), ["gpu-a"])[1]
    assert small1["vgpu.io/gpu-uuid"] == small2["vgpu.io/gpu-uuid"]
    assert small1["vgpu.io/gpu-index"] == small2["vgpu.io/gpu-index"]
    assert "vgpu.io/assume-time" in small1
    assert [b[3] for b in cluster.api.bindings] == ["gpu-a"] * 4
    assert cluster.api.bindings[0][2] == "uid-big-1"


def test_filter_says_why_a_node_fails(cluster: Scheduler) -> None:
    cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])
    cluster.schedule(pod_obj("big-2", 8000), ["gpu-a"])
    args = {"Pod": pod_obj("big-3", 8000), "Nodes": None, "NodeNames": ["gpu-a", "cpu-b"]}
    status, result = cluster.post("/filter", args)
    assert status == 200
    assert result["NodeNames"] == []
    assert result["FailedNodes"]["gpu-a"] == "no single GPU with 8000 MiB free; largest free 4200 MiB"
    assert "no vgpu.io/gpus annotation" in result["FailedNodes"]["cpu-b"]
    assert result["Error"] == ""


def test_a_node_is_read_again_from_the_api_before_memory_the_watch_still_shows_turns_a_pod_away(
    cluster: Scheduler,
) -> None:
    """kube-scheduler retries a turned-away pod the moment it sees memory free (a pod deleted); the
    extender's watch may not have that deletion yet. A pod turned away then waits for the next
    cluster event (up to 5 minutes on a quiet cluster), so a refusal is checked against the API."""
    cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])
    cluster.schedule(pod_obj("big-2", 8000), ["gpu-a"])
    del cluster.api.pods[("default", "big-1")]  # deleted; the extender's watch has not seen it yet
    args = {"Pod": pod_obj("big-3", 8000), "Nodes": None, "NodeNames": ["gpu-a", "cpu-b"]}
    status, result = cluster.post("/filter-tightest", args)
    assert status == 200, result
    assert result["NodeNames"] == ["gpu-a"]
    assert cluster.api.node_reads == ["gpu-a"]  # not cpu-b: no GPU pod can free memory there
    assert "uid-big-1" not in cluster.extender.model.placements


def test_a_refusal_the_api_confirms_stands(cluster: Scheduler) -> None:
    cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])
    cluster.schedule(pod_obj("big-2", 8000), ["gpu-a"])
    args = {"Pod": pod_obj("big-3", 8000), "Nodes": None, "NodeNames": ["gpu-a"]}
    status, result = cluster.post("/filter", args)
    assert status == 200, result
    assert result["NodeNames"] == []
    assert result["FailedNodes"]["gpu-a"] == "no single GPU with 8000 MiB free; largest free 4200 MiB"
    assert result["Error"] == ""
    assert cluster.api.node_reads == ["gpu-a"]
    # A pod too big for any GPU needs no read: no deletion can make it fit.
    cluster.post("/filter", {"Pod": pod_obj("huge", 13000), "Nodes": None, "NodeNames": ["gpu-a"]})
    assert cluster.api.node_reads == ["gpu-a"]


def test_a_refusal_the_api_cannot_confirm_is_an_error_kube_scheduler_retries_after_its_backoff(
    cluster: Scheduler,
) -> None:
    """kube-scheduler parks a pod an extender turned away until the next cluster event (up to 5
    minutes on a quiet cluster); an extender error sends it to the backoff queue instead (1-10 s).
    A refusal that may rest on a deletion the watch has not shown yet, and that the API server could
    not confirm, is that error: the pod is not parked on what may be stale."""
    cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])
    cluster.schedule(pod_obj("big-2", 8000), ["gpu-a"])
    cluster.api.fail_reads = True
    args = {"Pod": pod_obj("big-3", 8000), "Nodes": None, "NodeNames": ["gpu-a"]}
    status, result = cluster.post("/filter", args)
    assert status == 200, result
    assert result["NodeNames"] == []
    assert "could not read the pods on gpu-a from the API server" in result["Error"], result
    assert "retries" in result["Error"], result
    assert cluster.api.node_reads == ["gpu-a"]


def bound_before_the_watch_shows_it(cluster: Scheduler) -> dict[str, Any]:
    """gpu-a holds big-1, and big-2 (8000 MiB each) that our bind just placed: the watch has shown
    neither big-2's bind nor anything after it. Returns big-2 as the API has it."""
    cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])
    big2 = pod_obj("big-2", 8000)
    cluster.api.pods[("default", "big-2")] = big2
    cluster.extender.model.set_pod(big2)
    bind = {"PodName": "big-2", "PodNamespace": "default", "PodUID": "uid-big-2", "Node": "gpu-a"}
    assert cluster.post("/gpushare-scheduler/bind", bind) == (200, {"Error": ""})
    return big2


def test_a_pod_bound_and_deleted_before_the_watch_showed_it_bound_frees_its_gpu_at_the_next_try(
    cluster: Scheduler,
) -> None:
    """Our bind reserves the GPU until the watch shows the pod bound. If the pod is deleted before
    that (a loaded API server delays the watch), kube-scheduler retries the turned-away pod once, on
    the deletion: the refusal is read again from the API, which no longer lists the pod, so the
    reservation of a finished bind is dropped and the pod placed."""
    bound_before_the_watch_shows_it(cluster)
    assert cluster.extender.model.placements["uid-big-2"].reserved_at is not None  # the watch is behind
    del cluster.api.pods[("default", "big-2")]  # bound, then deleted; the watch has shown neither
    args = {"Pod": pod_obj("big-3", 8000), "Nodes": None, "NodeNames": ["gpu-a"]}
    status, result = cluster.post("/filter", args)
    assert status == 200, result
    assert result["NodeNames"] == ["gpu-a"], result
    assert "uid-big-2" not in cluster.extender.model.placements


def test_a_read_again_that_misses_a_bound_pod_never_frees_its_gpu(cluster: Scheduler) -> None:
    """tests/k8s (CI, 2026-12-05): right after our bind of w02 returned, a read of the node's pods
    for a refusal's recheck did not list it; its reservation was dropped and w04 was bound onto the
    same GPU. A pod the read misses frees its GPU only when the API says it is gone."""
    big2 = bound_before_the_watch_shows_it(cluster)
    big2["spec"]["nodeName"] = "gpu-a"  # bound in the API; its watch event has not come yet
    cluster.api.unlisted.add("uid-big-2")  # and the read of gpu-a's pods misses it
    args = {"Pod": pod_obj("big-3", 8000), "Nodes": None, "NodeNames": ["gpu-a"]}
    status, result = cluster.post("/filter", args)
    assert status == 200, result
    assert result["NodeNames"] == [], result
    assert "uid-big-2" in cluster.extender.model.placements


def test_a_reservation_whose_bind_is_in_flight_survives_a_read_again(cluster: Scheduler) -> None:
    """A read that started before our bind finished may not list the pod: its reservation stays
    (dropping it would let two pods onto the same memory)."""
    cluster.schedule(pod_obj("big-1", 8000), ["gpu-a"])
    model = cluster.extender.model
    gpu = model.fit("gpu-a", 80).gpu
    assert gpu is not None
    before_bind = time.monotonic()
    placement = model.reserve("uid-big-2", "default", "big-2", node="gpu-a", gpu=gpu, units=80)
    model.bound(placement)  # the bind's POST finished after the read below started
    assert not model.replace_node_pods("gpu-a", list(cluster.api.pods.values()), read_at=before_bind)
    assert "uid-big-2" in model.placements
    assert model.replace_node_pods("gpu-a", list(cluster.api.pods.values()), read_at=time.monotonic())
    assert "uid-big-2" not in model.placements


def test_a_request_larger_than_any_gpu_is_unresolvable(cluster: Scheduler) -> None:
    status, result = cluster.post("/filter", {"Pod": pod_obj("huge", 13000), "Nodes": None, "NodeNames": ["gpu-a"]})
    assert status == 200
    assert result["NodeNames"] == []
    assert "no GPU has 13000 MiB in total" in result["FailedAndUnresolvableNodes"]["gpu-a"]


def test_published_use_counts_even_for_pods_the_extender_did_not_place(cluster: Scheduler) -> None:
    cluster.extender.model.set_node(node_obj("gpu-a", [(GPU0, 12288, 100), (GPU1, 12288, 110)]))
    _status, result = cluster.post("/filter", {"Pod": pod_obj("p", 3000), "Nodes": None, "NodeNames": ["gpu-a"]})
    assert result["FailedNodes"]["gpu-a"] == "no single GPU with 3000 MiB free; largest free 2200 MiB"


def test_pods_without_gpu_memory_pass_and_score_zero(cluster: Scheduler) -> None:
    args = {"Pod": pod_obj("cpu-only", None), "Nodes": None, "NodeNames": ["gpu-a", "cpu-b"]}
    assert cluster.post("/filter", args)[1]["NodeNames"] == ["gpu-a", "cpu-b"]
    assert cluster.post("/prioritize", args)[1] == [{"Host": "gpu-a", "Score": 0}, {"Host": "cpu-b", "Score": 0}]


def test_prioritize_prefers_the_node_it_packs_tighter(cluster: Scheduler) -> None:
    model = cluster.extender.model
    model.set_node(node_obj("gpu-c", [(GPU0 + "c", 12288, 100)]))  # 22 units free
    args = {"Pod": pod_obj("p", 2000), "Nodes": None, "NodeNames": ["gpu-a", "gpu-c", "cpu-b"]}
    status, scores = cluster.post("/prioritize", args)
    by_host = {s["Host"]: s["Score"] for s in scores}
    assert status == 200 and by_host["gpu-c"] == 10 and by_host["gpu-a"] == 2 and by_host["cpu-b"] == 0


@pytest.mark.parametrize("cluster", ["tightest", "weighted"], indirect=True)
def test_pods_pack_onto_the_fuller_node(cluster: Scheduler) -> None:
    """Both packings fill a started node before they open an empty one."""
    model = cluster.extender.model
    model.set_node(node_obj("gpu-c", [(GPU0 + "c", 12288, 0)]))
    nodes = ["gpu-c", "gpu-a"]
    placed = [cluster.schedule(pod_obj(f"p{i}", 3000), nodes)[0] for i in range(5)]
    # gpu-c (first, all equal) takes the first pod, then every pod while it fits (4 x 30 of 122).
    assert placed == ["gpu-c"] * 4 + ["gpu-a"]


def looser_count(cluster: Scheduler) -> float:
    """The extender's count of nodes that fitted but were not among the tightest (process-wide)."""
    _status, text = cluster.get("/metrics")
    key = b'vgpu_extender_filter_nodes_total{outcome="looser"} '
    return sum(float(line[len(key) :]) for line in text.splitlines() if line.startswith(key))


def test_filter_tightest_keeps_only_the_tightest_nodes_and_their_ties(cluster: Scheduler) -> None:
    model = cluster.extender.model
    model.set_node(node_obj("gpu-c", [(GPU0 + "c", 12288, 100)]))  # 22 units free
    model.set_node(node_obj("gpu-d", [(GPU0 + "d", 12288, 100)]))  # the same
    model.set_node(node_obj("gpu-e", [(GPU0 + "e", 12288, 110)]))  # 12 units free: too small
    names = ["gpu-a", "gpu-c", "gpu-d", "gpu-e", "cpu-b"]
    args = {"Pod": pod_obj("p", 2000), "Nodes": None, "NodeNames": names}
    looser_before = looser_count(cluster)
    _status, loose = cluster.post("/filter", args)
    _status, tight = cluster.post("/filter-tightest", args)
    assert loose["NodeNames"] == ["gpu-a", "gpu-c", "gpu-d"]
    assert tight["NodeNames"] == ["gpu-c", "gpu-d"]  # both score 10; gpu-a scores 2
    # Why the others cannot take the pod is the same answer as filter's; gpu-a is left out silently.
    assert tight["FailedNodes"] == loose["FailedNodes"] and set(tight["FailedNodes"]) == {"gpu-e", "cpu-b"}
    assert looser_count(cluster) == looser_before + 1
    # A pod without GPU memory is not packed: every node passes.
    args["Pod"] = pod_obj("cpu-only", None)
    assert cluster.post("/filter-tightest", args)[1]["NodeNames"] == names


def test_prioritize_sees_each_bind_at_once(cluster: Scheduler) -> None:
    """Scores are kept per node between pods; a bind on a node must change that node's score."""
    args = {"Pod": pod_obj("next", 2000), "Nodes": None, "NodeNames": ["gpu-a"]}
    assert cluster.post("/prioritize", args)[1] == [{"Host": "gpu-a", "Score": 2}]  # (0 + 20) / 122
    cluster.schedule(pod_obj("first", 6000), ["gpu-a"])  # 60 units on one GPU of gpu-a
    assert cluster.post("/prioritize", args)[1] == [{"Host": "gpu-a", "Score": 7}]  # (60 + 20) / 122
    cluster.extender.model.remove_pod("uid-first")
    assert cluster.post("/prioritize", args)[1] == [{"Host": "gpu-a", "Score": 2}]


def test_full_node_list_when_not_node_cache_capable(cluster: Scheduler) -> None:
    nodes = {"items": [node_obj("gpu-a", None), node_obj("cpu-b", None)]}
    status, result = cluster.post("/filter", {"Pod": pod_obj("p", 1000), "Nodes": nodes, "NodeNames": None})
    assert status == 200
    assert result["NodeNames"] == ["gpu-a"]
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == ["gpu-a"]


def test_init_containers_count_once_and_app_containers_add_up(cluster: Scheduler) -> None:
    pod = pod_obj("multi", 6000)
    spec = pod["spec"]
    spec["containers"].append({"name": "side", "resources": {"limits": {"vgpu.io/gpu-memory": "40"}}})
    spec["initContainers"] = [{"name": "init", "resources": {"limits": {"vgpu.io/gpu-memory": "100"}}}]
    # app containers 60 + 40 = 100 units, init 100 units -> 100 units = 10000 MiB on one GPU
    node, _annotations = cluster.schedule(pod, ["gpu-a"])
    _status, result = cluster.post("/filter", {"Pod": pod_obj("p", 2300), "Nodes": None, "NodeNames": ["gpu-a"]})
    assert node == "gpu-a" and result["NodeNames"] == ["gpu-a"]  # the other GPU is still empty
    _status, result = cluster.post("/filter", {"Pod": pod_obj("q", 12200), "Nodes": None, "NodeNames": ["gpu-a"]})
    assert result["NodeNames"] == ["gpu-a"]


@pytest.mark.parametrize(
    ("path", "raw", "message"),
    [
        ("/filter", b"{not json", "not JSON"),
        ("/filter", b"[]", "ExtenderArgs"),
        ("/filter", b'{"Pod": null, "NodeNames": ["gpu-a"]}', "Pod must be a Pod object"),
        ("/filter", b'{"Pod": {"spec": {}}, "NodeNames": "gpu-a"}', "NodeNames must be a list"),
        ("/filter", b'{"Pod": {"spec": {}}, "NodeNames": ["gpu-a", 7]}', "NodeNames must be a list of node names"),
        ("/filter", b'{"Pod": {"spec": {}}, "NodeNames": [["gpu-a"]]}', "NodeNames must be a list of node names"),
        (
            "/prioritize",
            b'{"Pod": {"spec": {"containers": [{"name": "c", "resources": {"limits": '
            b'{"vgpu.io/gpu-memory": "lots"}}}]}}, "NodeNames": ["gpu-a"]}',
            "whole number of units",
        ),
        ("/bind", b'{"PodName": "p", "PodNamespace": "default", "Node": "gpu-a"}', "PodUID"),
        ("/bind", b'"bind me"', "ExtenderBindingArgs"),
    ],
)
def test_malformed_requests_get_400_with_a_message(cluster: Scheduler, path: str, raw: bytes, message: str) -> None:
    status, result = cluster.post(path, None, raw=raw)
    assert status == 400
    assert message in result["Error"]
    assert cluster.get("/healthz")[0] == 200  # still serving


def test_unknown_verb_is_404(cluster: Scheduler) -> None:
    status, result = cluster.post("/reprioritize", {"Pod": {}})
    assert status == 404 and "unknown verb" in result["Error"]


def test_failed_bind_reports_the_error_and_releases_the_reservation(cluster: Scheduler) -> None:
    cluster.api.fail_bind = True
    pod = pod_obj("big", 12000)
    cluster.api.pods[("default", "big")] = pod
    bind = {"PodName": "big", "PodNamespace": "default", "PodUID": "uid-big", "Node": "gpu-a"}
    status, result = cluster.post("/bind", bind)
    assert status == 200 and "forbidden" in result["Error"]
    assert cluster.extender.model.fit("gpu-a", 120).gpu is not None
    cluster.api.fail_bind = False
    status, result = cluster.post("/bind", bind)
    assert result == {"Error": ""}
    assert cluster.extender.model.nodes["gpu-a"].max_free == 122  # one GPU taken, the other free


def test_bind_refuses_when_the_gpu_filled_up_meanwhile(cluster: Scheduler) -> None:
    cluster.schedule(pod_obj("a", 12000), ["gpu-a"])
    cluster.schedule(pod_obj("b", 12000), ["gpu-a"])
    cluster.api.pods[("default", "c")] = pod_obj("c", 1000)
    _status, result = cluster.post(
        "/bind", {"PodName": "c", "PodNamespace": "default", "PodUID": "uid-c", "Node": "gpu-a"}
    )
    assert "no single GPU with 1000 MiB free" in result["Error"]


def test_model_is_rebuilt_from_list_and_follows_the_watch() -> None:
    api = FakeClusterApi()
    bound = pod_obj("running", 6000)
    bound["spec"]["nodeName"] = "gpu-a"
    bound["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": GPU0, "vgpu.io/gpu-index": "0"}
    bound["status"]["phase"] = "Running"
    api.objects["nodes"] = [node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 0)])]
    api.objects["pods"] = [bound]
    extender = Extender(ClusterModel("vgpu.io"), api)
    stop = threading.Event()
    start_background(extender, stop)  # no poster: the extender watches the pods itself
    wait_for("the extender to be ready", lambda: extender.ready()[0], 5, 0.02, seen=extender.ready)
    model = extender.model

    def free() -> list[int]:
        return [g.free for g in model.nodes["gpu-a"].gpus]

    assert free() == [62, 122]
    api.events["pods"].put(("DELETED", bound))
    wait_for("GPU 0 free again after the pod's deletion", lambda: free() == [122, 122], 5, 0.02, seen=free)
    # An expired watch makes the extender list again and rebuild.
    api.objects["pods"] = [bound]
    api.events["pods"].put(None)
    wait_for("the pod counted again after a new list", lambda: free() == [62, 122], 5, 0.02, seen=free)
    assert api.lists["pods"] == 2
    api.events["nodes"].put(("MODIFIED", node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 122)])))
    wait_for("GPU 1 full after the node's update", lambda: free() == [62, 0], 5, 0.02, seen=free)
    assert model.nodes["gpu-a"].max_free == 62
    stop.set()


def test_reservations_expire_when_the_pod_never_shows_up_bound(cluster: Scheduler) -> None:
    model = cluster.extender.model
    cluster.api.pods[("default", "ghost")] = pod_obj("ghost", 12000)
    cluster.post("/bind", {"PodName": "ghost", "PodNamespace": "default", "PodUID": "uid-ghost", "Node": "gpu-a"})
    assert model.nodes["gpu-a"].gpus[0].free == 2
    assert model.expire_reservations(now=time.monotonic() + 1) == 0
    assert model.expire_reservations(now=time.monotonic() + 301) == 1
    assert model.nodes["gpu-a"].gpus[0].free == 122


def test_readyz_waits_for_the_api_and_metrics_count_requests(cluster: Scheduler) -> None:
    status, body = cluster.get("/readyz")
    assert status == 503
    for informer in cluster.extender.informers.values():
        informer.synced = True
    assert cluster.get("/readyz")[0] == 503  # the pods not listed yet
    assert cluster.extender.pods is not None
    cluster.extender.pods.synced = True
    assert cluster.get("/readyz")[0] == 200
    cluster.post("/filter", {"Pod": pod_obj("p", 100), "Nodes": None, "NodeNames": ["gpu-a"]})
    status, body = cluster.get("/metrics")
    assert status == 200 and b'vgpu_extender_request_seconds_count{verb="filter"}' in body


def test_a_relist_of_many_pods_counts_each_gpu_once() -> None:
    model = ClusterModel("vgpu.io")
    nodes = [node_obj(f"n{i}", [(f"GPU-{i}-0", 12288, 0), (f"GPU-{i}-1", 12288, 0)]) for i in range(200)]
    pods = []
    for i in range(2000):
        pod = pod_obj(f"p{i}", 500, uid=f"u{i}")
        pod["spec"]["nodeName"] = f"n{i % 200}"
        pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": f"GPU-{i % 200}-{(i // 200) % 2}"}
        pod["status"]["phase"] = "Running"
        pods.append(pod)
    started = time.monotonic()
    model.replace_all(nodes, pods)
    elapsed = time.monotonic() - started
    # 10 pods of 5 units per node, alternating GPUs: 25 units on each GPU
    assert {g.free for state in model.nodes.values() for g in state.gpus} == {122 - 25}
    assert elapsed < 5.0


def test_unhealthy_gpus_take_no_pods(cluster: Scheduler) -> None:
    node = node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 0)])
    doc = json.loads(node["metadata"]["annotations"]["vgpu.io/gpus"])
    doc["gpus"][0]["healthy"] = False
    node["metadata"]["annotations"]["vgpu.io/gpus"] = json.dumps(doc)
    cluster.extender.model.set_node(node)
    _node, annotations = cluster.schedule(pod_obj("a", 1000), ["gpu-a"])
    assert annotations["vgpu.io/gpu-uuid"] == GPU1
    doc["gpus"][1]["healthy"] = False
    node["metadata"]["annotations"]["vgpu.io/gpus"] = json.dumps(doc)
    cluster.extender.model.set_node(node)
    _status, result = cluster.post("/filter", {"Pod": pod_obj("b", 1000), "Nodes": None, "NodeNames": ["gpu-a"]})
    assert result["FailedAndUnresolvableNodes"]["gpu-a"].startswith("no healthy GPU has 1000 MiB in total")


def test_node_heartbeats_leave_the_model_alone() -> None:
    """kwok and kubelet rewrite node status every few seconds; only a changed GPU annotation may
    drop prioritize's cached scores."""
    model = ClusterModel("vgpu.io")
    node = node_obj("gpu-a", [(GPU0, 12288, 0)])
    model.set_node(node)
    state = model.nodes["gpu-a"]
    assert state.score(10) == 1
    heartbeat = json.loads(json.dumps(node))
    heartbeat["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    model.set_node(heartbeat)
    assert model.nodes["gpu-a"] is state and state.scores == {10: 1}
    model.set_node(node_obj("gpu-a", [(GPU0, 12288, 61)]))
    assert model.nodes["gpu-a"].gpus[0].free == 61


def test_a_bound_pods_status_updates_keep_its_count() -> None:
    model = ClusterModel("vgpu.io")
    model.set_node(node_obj("gpu-a", [(GPU0, 12288, 0), (GPU1, 12288, 0)]))
    model.reserve("uid-p", "default", "p", node="gpu-a", gpu=model.nodes["gpu-a"].gpus[1], units=30)
    pod = pod_obj("p", 3000)
    pod["spec"]["nodeName"] = "gpu-a"
    pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": GPU1, "vgpu.io/gpu-index": "1"}
    for phase in ("Pending", "Running", "Running"):
        pod["status"]["phase"] = phase
        model.set_pod(pod)
        assert [g.free for g in model.nodes["gpu-a"].gpus] == [122, 92]
    # Seen bound: no longer a reservation that could expire.
    assert model.placements["uid-p"].reserved_at is None
    assert model.expire_reservations(now=time.monotonic() + 10**6) == 0
    pod["status"]["phase"] = "Succeeded"
    model.set_pod(pod)
    assert [g.free for g in model.nodes["gpu-a"].gpus] == [122, 122]


@pytest.mark.parametrize("feed", ["objects", "records"])
def test_each_gpu_counts_exactly_the_pods_placed_on_it_through_any_sequence_of_events(feed: str) -> None:
    """The model recounts a node from its own placements (kept by node, so an event's cost does not
    grow with the cluster): through a seeded mix of watch events, binds, failed binds, reads of a
    node and relists, every GPU still counts exactly the placements on it. The same whether the
    watch hands the model pod objects (the extender's own watch) or their records (the poster's)."""
    rng = random.Random(42)  # noqa: S311 - a reproducible sequence, not a secret
    model = ClusterModel("vgpu.io")

    def set_pod(pod: dict[str, Any]) -> None:
        if feed == "objects":
            model.set_pod(pod)
        else:
            model.set_record(pod_record(pod, "vgpu.io"))

    def relist(listed: list[dict[str, Any]]) -> None:
        if feed == "objects":
            model.replace_all(None, listed)
        else:
            model.replace_records([pod_record(pod, "vgpu.io") for pod in listed])

    model.replace_all([node_obj(f"n{i}", [(f"GPU-{i}-0", 12288, 0), (f"GPU-{i}-1", 12288, 0)]) for i in range(6)], [])
    pods: dict[str, dict[str, Any]] = {}  # what the API has bound

    def bind_seen(uid: str) -> None:
        pod = pod_obj(uid, 100 * rng.randint(1, 20), uid=uid)
        node = rng.randrange(6)
        pod["spec"]["nodeName"] = f"n{node}"
        pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": f"GPU-{node}-{rng.randrange(2)}"}
        pod["status"]["phase"] = rng.choice(["Pending", "Running"])
        pods[uid] = pod
        set_pod(pod)

    def our_bind(uid: str) -> None:
        node = model.nodes[f"n{rng.randrange(6)}"]
        placement = model.reserve(uid, "default", uid, node=node.name, gpu=rng.choice(node.gpus), units=5)
        (model.release if rng.random() < 0.5 else model.bound)(placement)

    def ended(uid: str) -> None:
        if uid in pods:
            pods[uid]["status"]["phase"] = "Succeeded"
            set_pod(pods.pop(uid))

    def node_read(_uid: str) -> None:
        name = f"n{rng.randrange(6)}"
        listed = [p for p in pods.values() if p["spec"]["nodeName"] == name and rng.random() < 0.8]
        model.replace_node_pods(name, listed, read_at=time.monotonic())

    def deleted(uid: str) -> None:
        pods.pop(uid, None)
        model.remove_pod(uid)

    def now_and_then(_uid: str) -> None:  # a relist, or every reservation expired
        if rng.random() < 0.05:
            relist(list(pods.values()))
        elif rng.random() < 0.05:
            model.expire_reservations(now=time.monotonic() + 10**6)

    def created(uid: str) -> None:  # pending: no node yet
        set_pod(pod_obj(uid, 500, uid=uid))

    steps = [created, bind_seen, deleted, our_bind, ended, node_read, now_and_then]
    for step in range(3000):
        rng.choice(steps)(f"u{rng.randrange(40)}")
        for state in model.nodes.values():
            for gpu in state.gpus:
                on_it = [p for p in model.placements.values() if p.node == state.name and p.gpu_uuid == gpu.uuid]
                assert gpu.placed == sum(p.units for p in on_it), f"step {step}: {gpu.uuid}"
            assert dict(model.placements.on_node(state.name)) == {
                uid: p for uid, p in model.placements.items() if p.node == state.name
            }, f"step {step}: {state.name}"


def share_node(name: str = "gpu-s", used: tuple[int, int] = (0, 0), cores: int = 100) -> dict[str, Any]:
    """A node with compute shares: two 12 GiB GPUs, each with `cores` and `used` cores taken."""
    return node_obj(
        name, [(GPU0 + name, 12288, 0), (GPU1 + name, 12288, 0)], cores=[(cores, used[0]), (cores, used[1])]
    )


def test_compute_shares_on_one_gpu_never_add_up_past_its_cores(cluster: Scheduler) -> None:
    """Shares go where the most compute is free (placement.py); once no GPU has the share free,
    the node fails the pod with the numbers, and a bound pod's share counts at once."""
    cluster.extender.model.set_node(share_node())
    placed = [cluster.schedule(pod_obj(f"s{i}", 1000, cores=60), ["gpu-s"])[1] for i in range(2)]
    assert {a["vgpu.io/gpu-index"] for a in placed} == {"0", "1"}  # 60 + 60 > 100: one on each GPU
    for name in ("s2", "s3"):  # 40 % each, filling both GPUs
        cluster.schedule(pod_obj(name, 1000, cores=40), ["gpu-s"])
    args = {"Pod": pod_obj("s4", 1000, cores=10), "Nodes": None, "NodeNames": ["gpu-s"]}
    _status, result = cluster.post("/filter", args)
    assert result["NodeNames"] == []
    assert result["FailedNodes"] == {"gpu-s": "no GPU with 1000 MiB free has 10 % compute free (the most is 0 %)"}
    cluster.extender.model.remove_pod("uid-s0")
    _status, result = cluster.post("/filter", args)
    assert result["NodeNames"] == ["gpu-s"]


def test_published_compute_use_counts_and_oversubscription_lets_shares_add_up_past_100(cluster: Scheduler) -> None:
    model = cluster.extender.model
    model.set_node(share_node(used=(95, 90)))  # what the device plugin saw kubelet hand out
    fit = model.fit("gpu-s", 10, cores=10)
    assert fit.gpu is not None and fit.gpu.index == 1
    assert (
        model.fit("gpu-s", 10, cores=11).reason == "no GPU with 1000 MiB free has 11 % compute free (the most is 10 %)"
    )
    model.set_node(share_node(used=(95, 90), cores=200))
    fit = model.fit("gpu-s", 10, cores=100)
    assert fit.gpu is not None and fit.gpu.index == 1


def test_shares_and_nodes_must_match_and_bad_shares_are_named(cluster: Scheduler) -> None:
    cluster.extender.model.set_node(share_node())
    args = {"Pod": pod_obj("s", 1000, cores=30), "Nodes": None, "NodeNames": ["gpu-a", "gpu-s", "cpu-b"]}
    _status, result = cluster.post("/filter", args)
    assert result["NodeNames"] == ["gpu-s"]
    assert result["FailedAndUnresolvableNodes"]["gpu-a"] == (
        "node has no compute shares (vgpu.io/gpu-cores needs MPS and compute shares on the node)"
    )
    args["Pod"] = pod_obj("m", 1000)
    _status, result = cluster.post("/filter", args)
    assert result["NodeNames"] == ["gpu-a"]
    assert result["FailedAndUnresolvableNodes"]["gpu-s"] == (
        "node shares its GPUs' compute: ask for vgpu.io/gpu-cores (percent of one GPU) with vgpu.io/gpu-memory"
    )
    lonely = pod_obj("c", None, cores=30)
    status, body = cluster.post("/filter", {**args, "Pod": lonely})
    assert status == 400 and "ask for vgpu.io/gpu-memory and vgpu.io/gpu-cores together" in body["Error"]
    status, body = cluster.post("/filter", {**args, "Pod": pod_obj("big", 1000, cores=101)})
    assert status == 400 and "vgpu.io/gpu-cores is a percentage of one GPU (1-100), got 101" in body["Error"]


def test_a_bound_pods_share_is_counted_from_the_watch() -> None:
    model = ClusterModel("vgpu.io")
    model.set_node(share_node())
    pod = pod_obj("p", 3000, cores=70)
    pod["spec"]["nodeName"] = "gpu-s"
    pod["metadata"]["annotations"] = {"vgpu.io/gpu-uuid": GPU1 + "gpu-s", "vgpu.io/gpu-index": "1"}
    model.set_pod(pod)
    assert [g.cores_free for g in model.nodes["gpu-s"].gpus] == [100, 30]
    pod["status"]["phase"] = "Succeeded"
    model.set_pod(pod)
    assert [g.cores_free for g in model.nodes["gpu-s"].gpus] == [100, 100]
