"""The rollout wait follows progress (issue 27): a slow rollout that keeps moving is waited out however
long it takes; one that stands still for the stall period fails, naming what was last seen and the
setting that gives a slow machine more time. The API is a stream of statuses, the clock a fake one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from ansible_collections.vgpu.isolation.plugins.module_utils.rollout_progress import (
    ReadError,
    Rollout,
    Stalled,
    follow,
    label_selector,
    rollout,
)

NAME = "DaemonSet kube-system/gpushare-scheduler-extender"
SETTING = "vgpu_stack_wait_timeout"


def daemonset(*, generation=2, observed=2, desired=1, updated=1, ready=1, available=None, strategy="RollingUpdate"):
    return {
        "kind": "DaemonSet",
        "metadata": {"namespace": "kube-system", "name": "gpushare-scheduler-extender", "generation": generation},
        "spec": {"updateStrategy": {"type": strategy}},
        "status": {
            "observedGeneration": observed,
            "desiredNumberScheduled": desired,
            "updatedNumberScheduled": updated,
            "numberReady": ready,
            "numberAvailable": ready if available is None else available,
        },
    }


def pod(
    uid: str,
    node: str = "",
    phase: str = "Pending",
    ready: bool = False,
    *,
    containers: Any = (),
    terminating: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "extender-" + uid, "uid": uid}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-02T12:00:00Z"
    return {
        "metadata": meta,
        "spec": {"nodeName": node} if node else {},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": list(containers),
        },
    }


def waiting(reason: str, restarts: int = 0) -> dict[str, Any]:
    return {"name": "extender", "ready": False, "restartCount": restarts, "state": {"waiting": {"reason": reason}}}


def running(ready: bool, restarts: int = 0) -> dict[str, Any]:
    return {"name": "extender", "ready": ready, "restartCount": restarts, "state": {"running": {"startedAt": "t"}}}


class FakeTime:
    """A clock that moves only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def stream(time: FakeTime, timeline: list[tuple]) -> Callable[[], list[Rollout]]:
    """observe() for a timeline of (from second, daemonset, pods): what the API shows at each time."""

    def observe() -> list[Rollout]:
        current = [entry for entry in timeline if entry[0] <= time.now][-1]
        if isinstance(current[1], Exception):
            raise current[1]
        return [rollout(current[1], NAME, current[2])]

    return observe


def run(timeline: list[tuple], stall: float = 40, interval: float = 2) -> tuple:
    time = FakeTime()
    observe = stream(time, timeline)
    return follow(observe, stall_seconds=stall, interval=interval, setting=SETTING, clock=time.clock, sleep=time.sleep)


def slow_rollout(step: float) -> list[tuple]:
    """The forced unit change's rollout on the loaded CI: the old pod goes, the new one is created,
    bound, started and Ready, each step `step` seconds after the one before."""
    old = pod("old", "node-a", "Running", ready=True, containers=[running(True)])
    rolling = daemonset(generation=3, observed=3, updated=1, ready=0)
    return [
        (0, daemonset(generation=3, observed=2), [old]),
        (step, daemonset(generation=3, observed=3, updated=0), [old]),
        (2 * step, daemonset(generation=3, observed=3, updated=0, ready=0), [pod("old", "node-a", terminating=True)]),
        (3 * step, rolling, [pod("new")]),
        (4 * step, rolling, [pod("new", "node-a")]),
        (5 * step, rolling, [pod("new", "node-a", containers=[waiting("ContainerCreating")])]),
        (6 * step, rolling, [pod("new", "node-a", "Running", containers=[running(False)])]),
        (
            7 * step,
            daemonset(generation=3, observed=3),
            [pod("new", "node-a", "Running", True, containers=[running(True)])],
        ),
    ]


def test_a_rollout_that_keeps_moving_is_waited_out_past_the_stall_period() -> None:
    """The failure of issue 27: 30 s between steps, 210 s in all, against a 40 s period."""
    last, waited = run(slow_rollout(step=30), stall=40)
    assert [r.done for r in last] == [True]
    assert waited >= 210


def test_a_rollout_that_stands_still_fails_after_the_stall_period_naming_what_it_saw_and_the_setting() -> None:
    stuck = slow_rollout(step=10)[:5]  # the new pod is bound and never starts
    with pytest.raises(Stalled) as failure:
        run(stuck, stall=40)
    message = str(failure.value)
    assert message.startswith("The rollout made no progress for 40 s (waited 80 s in all).")
    assert (
        f"{NAME}: generation 3 (observed 3), 1 of 1 pods updated, 0 ready, 0 available; "
        "pods not Ready: extender-new on node-a Pending not Ready" in message
    )
    assert f"give it more time with {SETTING} (now 40 s without progress)" in message
    assert [(r.name, r.done) for r in failure.value.rollouts] == [(NAME, False)], "the module returns them"


def test_a_crash_loop_repeats_itself_and_is_a_stall() -> None:
    """Restarts move the restart count and the container between the same states: no progress."""
    ds = daemonset(generation=3, observed=3, updated=1, ready=0)
    timeline = [
        (t, ds, [pod("new", "node-a", "Running", containers=[state])])
        for t, state in enumerate(
            [waiting("ContainerCreating")]
            + [running(False, n) if n % 2 else waiting("CrashLoopBackOff", n) for n in range(1, 100)]
        )
    ]
    with pytest.raises(Stalled) as failure:
        run(timeline, stall=20, interval=1)
    assert "pods not Ready: extender-new on node-a Running not Ready (extender " in str(failure.value)


def test_failed_reads_are_no_progress_and_the_last_error_is_named() -> None:
    first = slow_rollout(step=10)[:1]
    timeline = [*first, (5, ReadError("503 Service Unavailable"), [])]
    with pytest.raises(Stalled) as failure:
        run(timeline, stall=40)
    assert "The last read of the API failed: 503 Service Unavailable." in str(failure.value)
    assert "generation 3 (observed 2)" in str(failure.value), "what was last seen before the reads failed"


def test_reads_that_fail_for_a_while_do_not_end_a_rollout_that_then_moves_on() -> None:
    timeline = slow_rollout(step=30)
    timeline.insert(1, (5, ReadError("timed out"), []))
    last = run(timeline, stall=40)[0]
    assert last[0].done


def test_a_workload_not_created_yet_is_waited_for_and_named() -> None:
    time = FakeTime()

    def observe() -> list[Rollout]:
        return [rollout(None, NAME, [])]

    with pytest.raises(Stalled) as failure:
        follow(observe, stall_seconds=10, interval=2, setting=SETTING, clock=time.clock, sleep=time.sleep)
    assert f"Last seen: {NAME}: not found." in str(failure.value)


@pytest.mark.parametrize(
    ("ds", "done"),
    [
        (daemonset(), True),
        (daemonset(generation=3, observed=2), False),  # the controller has not seen the change yet
        (daemonset(desired=2, updated=1, ready=2), False),  # one node still runs the old template
        (daemonset(desired=2, updated=2, ready=1), False),
        (daemonset(ready=1, available=0), False),  # Ready, not yet for minReadySeconds
        (daemonset(desired=0, updated=0, ready=0), True),  # no node to run on
        (daemonset(desired=2, updated=1, ready=2, strategy="OnDelete"), True),
    ],
)
def test_a_daemonset_is_rolled_out_as_kubectl_rollout_status_says(ds: dict[str, Any], done: bool) -> None:
    assert rollout(ds, NAME, []).done is done


def deployment(*, replicas=1, generation=1, observed=1, updated=1, total=1, available=1):
    return {
        "kind": "Deployment",
        "metadata": {"namespace": "ns", "name": "d", "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": total,
            "updatedReplicas": updated,
            "readyReplicas": available,
            "availableReplicas": available,
        },
    }


@pytest.mark.parametrize(
    ("obj", "done"),
    [
        (deployment(), True),
        (deployment(generation=2), False),
        (deployment(replicas=2, updated=1, total=2, available=2), False),
        (deployment(updated=1, total=2, available=1), False),  # an old pod still terminating
        (deployment(replicas=2, updated=2, total=2, available=1), False),
    ],
)
def test_a_deployment_is_rolled_out_as_kubectl_rollout_status_says(obj: dict[str, Any], done: bool) -> None:
    assert rollout(obj, "Deployment ns/d", []).done is done


def test_the_selector_of_a_workload_lists_its_pods() -> None:
    selector = {
        "matchLabels": {"b": "2", "a": "1"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["x", "y"]},
            {"key": "gone", "operator": "DoesNotExist"},
        ],
    }
    assert label_selector(selector) == "a=1,b=2,tier in (x,y),!gone"


def test_a_large_rollout_names_ten_pods_that_are_not_ready_and_counts_the_rest() -> None:
    pods = [pod(f"p{i:02d}", f"node-{i}") for i in range(12)]
    summary = rollout(daemonset(desired=12, updated=12, ready=0), NAME, pods).summary
    assert "extender-p09 on node-9 Pending not Ready and 2 more" in summary
    assert "extender-p10" not in summary


def test_a_pod_marked_not_ready_by_the_node_controller_says_its_containers_are_ready() -> None:
    """What the loaded CI of issue 27 showed: the node controller set the pod's Ready condition to
    False when the simulated node missed heartbeats; its containers stayed ready, and nothing set
    the pod Ready again. The summary points at the node, not the containers."""
    marked = pod("new", "node-a", "Running", ready=False, containers=[running(True)])
    summary = rollout(daemonset(generation=3, observed=3, ready=0), NAME, [marked]).summary
    assert summary.endswith(
        "pods not Ready: extender-new on node-a Running not Ready "
        "(its containers are ready: the node has not reported the pod Ready again)"
    )
