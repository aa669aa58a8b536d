"""What users see when a GPU request cannot be met or the extender is restarted or down.

Real kube-scheduler and extender processes; kwok simulates the nodes (there is no GPU here).
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from tests.k8s import cluster

SCHEDULE_TIMEOUT = 60


def bound(core: Any, namespace: str, name: str, timeout: float = SCHEDULE_TIMEOUT) -> Any:
    return cluster.wait_bound(core, namespace, name, timeout)


def still_pending(core: Any, namespace: str, name: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        node = cluster.bound_node(core, namespace, name)
        assert node is None, f"{name} should stay Pending but was bound to {node}"
        time.sleep(1)


def gpu_use(pods: list[Any]) -> dict[tuple[str, str], int]:
    """MiB asked of each (node, GPU UUID), from the extender's bind annotations."""
    use: dict[tuple[str, str], int] = defaultdict(int)
    for pod in pods:
        uid = (pod.metadata.annotations or {}).get(cluster.ANNOTATION_UUID)
        assert uid, f"{pod.metadata.name} is bound but has no {cluster.ANNOTATION_UUID}"
        units = int(pod.spec.containers[0].resources.limits[cluster.RESOURCE])
        use[(pod.spec.node_name, uid)] += units * cluster.UNIT_MIB
    return dict(use)


def wait_for_reason(core: Any, namespace: str, pod: str, *parts: str) -> str:
    """The first FailedScheduling message of `pod` that contains every one of `parts`."""

    def check() -> str | None:
        return next((m for m in cluster.scheduling_events(core, namespace, pod) if all(p in m for p in parts)), None)

    try:
        return cluster.wait_for(f"a FailedScheduling event of {pod} saying {parts}", check, timeout=SCHEDULE_TIMEOUT)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; events: {cluster.scheduling_events(core, namespace, pod)}") from None


def test_pod_larger_than_any_gpu_stays_pending_with_the_reason(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory
) -> None:
    # 2 x 12 GiB: the node has 24576 MiB in all, but no single GPU has 13000 MiB.
    selector = gpu_nodes(1)
    core.create_namespaced_pod(namespace, cluster.pod_body("huge", 13000, selector))
    # The extender's reason: the size asked and the largest free GPU (122 units of 100 MiB).
    wait_for_reason(core, namespace, "huge", "13000 MiB", "largest free 12200 MiB")
    still_pending(core, namespace, "huge", 5)


def test_extender_restart_rebuilds_its_state(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, extender_back_up: None
) -> None:
    selector = gpu_nodes(2)  # 4 GPUs of 12288 MiB
    before = [bound(core, namespace, n) for n in _create(core, namespace, ["a", "b"], 8000, selector)]
    cluster.ctl("stop-extender")
    cluster.ctl("start-extender")

    # A fresh extender that forgot a and b would put c or d on their GPUs.
    after = [bound(core, namespace, n) for n in _create(core, namespace, ["c", "d"], 8000, selector)]
    use = gpu_use(before + after)
    assert sorted(use.values()) == [8000] * 4, f"8000 MiB pods doubled up on a GPU after the restart: {use}"

    # Every GPU now has 4288 MiB free: a fifth 8000 MiB pod must wait, a 2000 MiB one still fits.
    _create(core, namespace, ["e"], 8000, selector)
    _create(core, namespace, ["f"], 2000, selector)
    small = bound(core, namespace, "f")
    assert gpu_use([small]), "the 2000 MiB pod has no GPU recorded"
    still_pending(core, namespace, "e", 5)
    # The restarted extender counts the old pods: each GPU has 12200 - 8000 MiB left.
    wait_for_reason(core, namespace, "e", "no single GPU with 8000 MiB free", "largest free 4200 MiB")


def test_gpu_pods_wait_while_the_extender_is_down_and_others_schedule(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, extender_back_up: None
) -> None:
    selector = gpu_nodes(1)
    cluster.ctl("stop-extender")
    _create(core, namespace, ["gpu"], 2000, selector)
    core.create_namespaced_pod(namespace, cluster.pod_body("plain", None, selector))

    plain = bound(core, namespace, "plain")
    assert plain.spec.node_name.startswith("gpu-"), plain.spec.node_name
    still_pending(core, namespace, "gpu", 10)
    messages = cluster.scheduling_events(core, namespace, "gpu")
    assert messages, "no FailedScheduling event for the GPU pod while the extender is down"

    cluster.ctl("start-extender")
    # Errors send the pod to the scheduler's backoff queue (at most 10 s by default).
    pod = bound(core, namespace, "gpu", timeout=90)
    assert gpu_use([pod])


def test_twenty_gpu_pods_that_waited_out_an_extender_outage_never_overcommit_a_gpu(
    core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, extender_back_up: None
) -> None:
    """Issue 27's fault: the extender goes away while 20 GPU pods wait. When it is back they all
    come to it at once. 4 GPUs of 12288 MiB take one 7000 MiB pod each; each node still has 10400
    MiB free in all, so kube-scheduler's own fit would take a second one: only the extender's
    per-GPU count keeps the other 16 waiting."""
    selector = gpu_nodes(2)  # 4 GPUs of 12288 MiB
    cluster.ctl("stop-extender")
    names = _create(core, namespace, [f"w{i:02d}" for i in range(20)], 7000, selector)
    cluster.wait_for(
        f"a FailedScheduling event of {names[-1]} while the extender is down",
        lambda: cluster.scheduling_events(core, namespace, names[-1]),
        timeout=SCHEDULE_TIMEOUT,
    )
    cluster.ctl("start-extender")

    def bound_pods() -> list[Any]:
        return [p for p in core.list_namespaced_pod(namespace).items if p.spec.node_name]

    cluster.wait_for("4 of the 20 pods bound", lambda: len(bound_pods()) >= 4, timeout=180)
    waiting = sorted(p.metadata.name for p in core.list_namespaced_pod(namespace).items if not p.spec.node_name)
    assert len(waiting) == 16, waiting
    # The last ones judged again by the restarted extender, and turned away: still 4 placed.
    for name in (waiting[0], waiting[-1]):
        wait_for_reason(core, namespace, name, "no single GPU with 7000 MiB free", "largest free 5200 MiB")
    use = gpu_use(bound_pods())
    assert sorted(use.values()) == [7000] * 4, f"a GPU over-committed: {use}"


def _create(core: Any, namespace: str, names: list[str], mib: int, selector: dict[str, str]) -> list[str]:
    for name in names:
        core.create_namespaced_pod(namespace, cluster.pod_body(name, mib, selector))
    return names
