"""The reference bin-pack scenario through the real kube-scheduler and our extender.

Nodes are simulated by kwok (there is no GPU here); everything else is the real control plane.
The GPU each pod got is read from the annotations the extender writes at bind.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from tests.k8s import cluster

SCHEDULE_TIMEOUT = 60


def schedule(core: Any, namespace: str, name: str, mib: int, selector: dict[str, str]) -> Any:
    """Create one GPU pod and return it once bound, with the extender's annotations."""
    core.create_namespaced_pod(namespace, cluster.pod_body(name, mib, selector))
    return cluster.wait_bound(core, namespace, name, SCHEDULE_TIMEOUT)


def gpu_of(pod: Any) -> tuple[str, str, int]:
    annotations = pod.metadata.annotations or {}
    assert cluster.ANNOTATION_UUID in annotations, f"{pod.metadata.name} has no {cluster.ANNOTATION_UUID}"
    return pod.spec.node_name, annotations[cluster.ANNOTATION_UUID], int(annotations[cluster.ANNOTATION_INDEX])


def test_reference_binpack_on_two_12gib_gpus(core: Any, namespace: str, gpu_nodes: cluster.NodeFactory) -> None:
    selector = gpu_nodes(1)
    big = [schedule(core, namespace, f"big-{i}", 8000, selector) for i in range(2)]
    small = [schedule(core, namespace, f"small-{i}", 2000, selector) for i in range(2)]

    big_gpus = [gpu_of(p) for p in big]
    small_gpus = [gpu_of(p) for p in small]
    assert big_gpus[0] != big_gpus[1], f"two 8000 MiB pods share a 12 GiB GPU: {big_gpus}"
    assert small_gpus[0] == small_gpus[1], f"the 2000 MiB pods were spread, not packed: {small_gpus}"

    # The recorded GPU is one the node really has, with the index the device plugin published.
    node = core.read_node(big[0].spec.node_name)
    published = json.loads(node.metadata.annotations[f"{cluster.PREFIX}/gpus"])["gpus"]
    by_uuid = {g["uuid"]: g["index"] for g in published}
    for _node, uid, index in big_gpus + small_gpus:
        assert by_uuid.get(uid) == index, f"{uid} index {index} does not match the node's {by_uuid}"


def posted_by_the_poster() -> float:
    """The Bindings the extender's poster process posted so far (extender_poster.py)."""
    for line in cluster.extender_get("/metrics").decode().splitlines():
        if line.startswith('vgpu_extender_bindings_posted_total{by="poster"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_concurrent_pods_never_overbook_a_gpu(core: Any, namespace: str, gpu_nodes: cluster.NodeFactory) -> None:
    """Eight 5000 MiB pods at once on 2 nodes x 2 GPUs: two per GPU, never three (15000 > 12288).
    Their Bindings are posted by the extender's poster process (issue 42), each GPU reserved by
    the extender first."""
    posted = posted_by_the_poster()
    selector = gpu_nodes(2)
    names = [f"p-{i}" for i in range(8)]
    for name in names:
        core.create_namespaced_pod(namespace, cluster.pod_body(name, 5000, selector))
    pods = [cluster.wait_bound(core, namespace, name, SCHEDULE_TIMEOUT) for name in names]
    per_gpu: dict[tuple[str, str], int] = defaultdict(int)
    for pod in pods:
        node, uid, _index = gpu_of(pod)
        per_gpu[(node, uid)] += 5000
    assert sorted(per_gpu.values()) == [10000] * 4, f"GPU use in MiB: {dict(per_gpu)}"
    assert posted_by_the_poster() - posted == 8
