"""The throughput bench's summary: medians per mode, ratios against plain's median, counts."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes.client.rest import ApiException

from bench.scheduling_throughput import (
    cleanup_timeout,
    cpu_per_pod,
    cycle_from_metrics,
    delete_run,
    quantile,
    run_plan,
    summarize,
)


def run(nodes: int, mode: str, rate: float, late: int = 0, failed: int = 0) -> dict[str, object]:
    result: dict[str, object] = {"nodes": nodes, "mode": mode, "pods_per_s": rate, "late": late}
    if mode != "plain":
        result["failed_binds"] = failed
    return result


def test_ratios_are_between_medians_per_node_count() -> None:
    results = [
        run(1000, "plain", 200.0),
        run(1000, "extender", 150.0, failed=1),
        run(1000, "plain", 300.0, late=4),  # one fast outlier does not move the median far
        run(1000, "extender", 90.0),
        run(1000, "plain", 210.0),
        run(1000, "extender", 140.0, failed=2),
        run(100, "plain", 400.0),
        run(100, "extender", 100.0),
    ]
    rows = {(row["nodes"], row["mode"]): row for row in summarize(results)}
    plain, extender = rows[(1000, "plain")], rows[(1000, "extender")]
    assert plain["median_pods_per_s"] == 210.0 and plain["runs"] == [200.0, 300.0, 210.0]
    assert extender["median_pods_per_s"] == 140.0 and extender["vs_plain"] == round(140 / 210, 3)
    assert (extender["failed_binds"], plain["failed_binds"], plain["late"]) == (3, "-", 4)
    assert rows[(100, "extender")]["vs_plain"] == 0.25  # each node count against its own plain


def test_latency_quantiles_come_from_the_buckets_counted_during_the_run() -> None:
    """p50 and p99 of the requests between two reads of the extender's cumulative histogram,
    interpolated within a bucket as Prometheus does; requests before the run do not count."""
    before = {0.001: 50.0, 0.002: 50.0, 0.005: 50.0, float("inf"): 50.0}
    after = {0.001: 100.0, 0.002: 140.0, 0.005: 149.0, float("inf"): 150.0}  # 50 / 40 / 9 / 1 new
    assert quantile(0.5, before, after) == 0.001  # the 50th of 100 is the last one under 1 ms
    assert quantile(0.25, before, after) == pytest.approx(0.0005)
    assert quantile(0.9, before, after) == pytest.approx(0.002)
    assert quantile(0.995, before, after) == 0.005  # past the last finite bound: that bound
    assert quantile(0.5, after, after) is None  # no request in the run


def test_the_summary_carries_the_extenders_latency_and_memory() -> None:
    results = []
    for p50, rss in ((1.0, 80.0), (3.0, 95.5), (2.0, 90.0)):
        result = run(1000, "extender", 100.0)
        result.update({"bind_calls": 10, "bind_p50_ms": p50, "bind_p99_ms": 2 * p50, "extender_rss_mib": rss})
        results.append(result)
    results.append(run(1000, "plain", 200.0))
    rows = {row["mode"]: row for row in summarize(results)}
    assert (rows["extender"]["bind_p50_ms"], rows["extender"]["bind_p99_ms"]) == (2.0, 4.0)
    assert rows["extender"]["extender_rss_mib"] == 95.5
    assert "bind_p50_ms" not in rows["plain"] and "extender_rss_mib" not in rows["plain"]


def test_cpu_per_pod_counts_each_process_over_the_run_and_a_restarted_one_from_its_start() -> None:
    """Readings are (PID, CPU seconds so far); kube-scheduler is started between the two readings,
    so its whole CPU counts; a process that stopped meanwhile is not in the second reading."""
    before = {"kube-apiserver": (10, 100.0), "extender": (20, 5.0), "kube-scheduler": (30, 7.0), "kwok": (40, 1.0)}
    after = {"kube-apiserver": (10, 104.0), "extender": (20, 6.5), "kube-scheduler": (31, 2.0)}
    assert cpu_per_pod(before, after, 500) == {
        "kube-apiserver": 8.0,
        "extender": 3.0,
        "kube-scheduler": 4.0,
        "total": 15.0,
    }


def test_the_summary_gives_the_median_cpu_per_pod_of_each_process() -> None:
    results = []
    for apiserver, extender in ((8.0, 3.0), (10.0, 5.0), (9.0, 4.0)):
        result = run(1000, "extender", 100.0)
        result["cpu_ms_per_pod"] = {"kube-apiserver": apiserver, "extender": extender, "total": apiserver + extender}
        results.append(result)
    rows = {row["mode"]: row for row in summarize([*results, run(1000, "plain", 200.0)])}
    assert rows["extender"]["cpu_ms_per_pod"] == {"extender": 4.0, "kube-apiserver": 9.0, "total": 13.0}
    assert list(rows["extender"]["cpu_ms_per_pod"])[-1] == "total"
    assert "cpu_ms_per_pod" not in rows["plain"]


class SlowApi:
    """Plays kube-apiserver's answers to a run's clean-up (a fake: the bench's clean-up of 10 000
    pods needs a loaded control plane to time out; this records the calls instead)."""

    def __init__(self, error: Exception) -> None:
        self.calls: list[str] = []
        self.error = error

    def delete_collection_namespaced_pod(self, namespace: str, grace_period_seconds: int) -> None:
        self.calls.append(f"delete pods of {namespace}")
        raise self.error

    def delete_namespace(self, namespace: str) -> None:
        self.calls.append(f"delete namespace {namespace}")


@pytest.mark.parametrize(
    "error",
    [
        ApiException(status=504, reason="Gateway Timeout"),
        # 5000 nodes x 10 pods on 2 cores: the connection closed after the 60 s, no answer.
        urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError("closed without response")),
    ],
    ids=["504", "closed"],
)
def test_a_clean_up_the_api_server_times_out_on_still_deletes_the_namespace(error: Exception) -> None:
    """At 10 pods per node (10 000 pods a run) kube-apiserver answered the pods' delete-collection
    with 504 after its 60 s, and the bench stopped before the extender's run; at 50 000 pods it
    closed the connection instead. The namespace's deletion removes the rest, which the bench then
    waits for."""
    api = SlowApi(error)
    delete_run(api, "bench-x")
    assert api.calls == ["delete pods of bench-x", "delete namespace bench-x"]
    assert cleanup_timeout(500) == 120 and cleanup_timeout(10000) == 500


def test_kube_schedulers_cycle_is_read_per_part_summed_over_its_status_labels() -> None:
    """The bench's reading of kube-scheduler's /metrics (an excerpt of kube-scheduler 1.36's, two
    pods scheduled): the algorithm's mean per pod, and the PreFilter and Score plugins' means
    summed over their status labels; other extension points are not read."""
    point = "scheduler_framework_extension_point_duration_seconds"

    def part(kind: str, where: str, status: str, value: float) -> str:
        return f'{point}_{kind}{{extension_point="{where}",profile="default-scheduler",status="{status}"}} {value}'

    text = "\n".join(
        [
            "# TYPE scheduler_scheduling_algorithm_duration_seconds histogram",
            'scheduler_scheduling_algorithm_duration_seconds_bucket{le="0.001"} 0',
            "scheduler_scheduling_algorithm_duration_seconds_sum 0.004",
            "scheduler_scheduling_algorithm_duration_seconds_count 2",
            part("sum", "PreFilter", "Success", 0.0012),
            part("count", "PreFilter", "Success", 1),
            part("sum", "PreFilter", "Unschedulable", 0.0008),
            part("count", "PreFilter", "Unschedulable", 1),
            part("sum", "Score", "Success", 0.0004),
            part("count", "Score", "Success", 2),
            part("sum", "Bind", "Success", 9),
            part("count", "Bind", "Success", 2),
        ]
    )
    assert cycle_from_metrics(text) == {"algorithm_ms": 2.0, "prefilter_ms": 1.0, "score_ms": 0.2}
    assert cycle_from_metrics("") == {"algorithm_ms": 0.0, "prefilter_ms": 0.0, "score_ms": 0.0}


def test_the_last_run_is_left_for_the_harness_to_tear_down() -> None:
    """Every run but the last is cleaned up before the next one counts; the last one's pods go
    with the cluster (run-bench.sh's down.sh), so the bench does not wait on a delete of 50 000
    pods (23 minutes on 2 cores) that nothing reads."""
    plan = list(run_plan([1000, 100], 2, ["plain", "extender"]))
    assert [entry[:3] for entry in plan] == [
        (100, 0, "plain"),
        (100, 0, "extender"),
        (100, 1, "plain"),
        (100, 1, "extender"),
        (1000, 0, "plain"),
        (1000, 0, "extender"),
        (1000, 1, "plain"),
        (1000, 1, "extender"),
    ]
    assert [entry[3] for entry in plan] == [True] * 7 + [False]
    assert list(run_plan([5000], 1, ["plain"])) == [(5000, 0, "plain", False)]
