"""The throughput bench's summary: medians per mode, ratios against plain's median, counts."""

from __future__ import annotations

from bench.scheduling_throughput import summarize


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
