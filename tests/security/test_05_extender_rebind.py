"""Finding 5: binding an already-bound pod again got a 409 from the API server, and that error
path removed the pod's existing placement; the next filter admitted 8 units onto a GPU holding 3
of 10 (11 units recorded on 10).

A bind for a pod the extender already placed, or one the API says is bound, must be refused
without touching its placement. The extender runs over real HTTP; the API server is the test
peer FakeClusterApi, which answers a second binding with 409 as kube-apiserver does (tests/k8s
runs the extender against a real kube-apiserver).
"""

from __future__ import annotations

import json
from typing import Any

from fakes import Scheduler, node_obj, pod_obj

SMALL_GPU = "GPU-cccccccc-0000-0000-0000-000000000000"


def one_small_gpu(cluster: Scheduler) -> None:
    """Node gpu-s with one GPU of 10 units (1000 MiB)."""
    cluster.extender.model.set_node(node_obj("gpu-s", [(SMALL_GPU, 1000, 0)]))


def bind_args(pod: dict[str, Any], node: str) -> dict[str, str]:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}


def used_units(cluster: Scheduler) -> int:
    return cluster.extender.model.nodes["gpu-s"].gpus[0].used


def test_a_second_bind_of_a_bound_pod_is_refused_and_its_placement_kept(cluster: Scheduler) -> None:
    one_small_gpu(cluster)
    holder = pod_obj("holder", 300)
    cluster.schedule(holder, ["gpu-s"])  # bound and seen bound through the watch
    assert used_units(cluster) == 3
    status, result = cluster.post("/bind", bind_args(holder, "gpu-s"))
    assert status == 200 and "already" in result["Error"], result
    assert used_units(cluster) == 3, "the refused bind changed the GPU's count"
    status, result = cluster.post("/filter", {"Pod": pod_obj("big", 800), "Nodes": None, "NodeNames": ["gpu-s"]})
    assert result["NodeNames"] == [], "8 units were admitted onto a GPU holding 3 of 10"
    assert len(cluster.api.bindings) == 1


def test_a_bind_for_a_pod_placed_but_not_yet_seen_bound_is_refused(cluster: Scheduler) -> None:
    one_small_gpu(cluster)
    pod = pod_obj("pending", 300)
    cluster.api.pods[("default", "pending")] = pod
    cluster.extender.model.set_pod(pod)
    assert cluster.post("/bind", bind_args(pod, "gpu-s"))[1] == {"Error": ""}
    placement = cluster.extender.model.placements["uid-pending"]
    status, result = cluster.post("/bind", bind_args(pod, "gpu-s"))
    assert status == 200 and "already" in result["Error"], result
    assert cluster.extender.model.placements["uid-pending"] is placement
    assert used_units(cluster) == 3


def test_a_bind_for_a_pod_the_api_reports_bound_is_refused(cluster: Scheduler) -> None:
    """The extender has not seen this pod at all (a restart, a lagging watch); the API has it bound."""
    one_small_gpu(cluster)
    pod = pod_obj("elsewhere", 300)
    bound = json.loads(json.dumps(pod))
    bound["spec"]["nodeName"] = "gpu-other"
    cluster.api.pods[("default", "elsewhere")] = bound
    status, result = cluster.post("/bind", bind_args(pod, "gpu-s"))
    assert status == 200 and "already" in result["Error"], result
    assert cluster.api.bindings == [] and used_units(cluster) == 0
