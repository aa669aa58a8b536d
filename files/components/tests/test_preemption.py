"""preemption.py: the victims that free one GPU for a pod of higher priority (issue 42)."""

from __future__ import annotations

import itertools
import random

from vgpu_components.preemption import Gpu, Refusal, Resident, Victims, choose, selects

A, B = "GPU-a", "GPU-b"


def two_gpus(used_a: int, used_b: int) -> list[Gpu]:
    """2 x 12 GiB at 100 MiB a unit, as the e2e site's worker A."""
    return [Gpu(0, A, 122, used_a), Gpu(1, B, 122, used_b)]


def pod(name: str, gpu: str, units: int, priority: int = 0, *, protected: bool = False, cores: int = 0) -> Resident:
    return Resident(f"uid-{name}", f"default/{name}", priority, units, gpu, cores=cores, protected=protected)


def names(found: Victims | Refusal) -> set[str]:
    assert isinstance(found, Victims), found
    return {p.name.split("/", 1)[1] for p in found.pods}


def test_the_pods_of_one_gpu_are_evicted_never_the_one_kube_scheduler_would_pick_elsewhere() -> None:
    """The issue's scenario: four low pods of 48 units, two per GPU; a high pod of 79 units. One
    victim frees node-level memory, but only both pods of one GPU free 79 units there."""
    pods = [pod("a1", A, 48), pod("a2", A, 48), pod("b1", B, 48), pod("b2", B, 48)]
    found = choose(two_gpus(96, 96), pods, priority=1000, units=79)
    assert names(found) == {"a1", "a2"}
    assert isinstance(found, Victims) and [g.index for g in found.gpus] == [0]


def test_a_fragmented_node_frees_the_gpu_that_needs_fewest_victims() -> None:
    pods = [pod("a1", A, 30), pod("a2", A, 30), pod("a3", A, 30), pod("b1", B, 100)]
    # GPU a: 32 free, three 30s; GPU b: 22 free, one 100. 79 units: one victim on b.
    assert names(choose(two_gpus(90, 100), pods, priority=10, units=79)) == {"b1"}


def test_equal_and_higher_priority_are_never_preempted() -> None:
    pods = [pod("a1", A, 60, priority=10), pod("a2", A, 60, priority=20), pod("b1", B, 120, priority=10)]
    found = choose(two_gpus(120, 120), pods, priority=10, units=79, unit_mib=100)
    assert isinstance(found, Refusal)
    assert "GPU 0 would still be 7700 MiB short after evicting its 0 pod(s)" in found.reason
    assert "GPU 1 would still be 7700 MiB short after evicting its 0 pod(s)" in found.reason
    # One priority higher, the pods of priority 10 are victims; the one of 20 never.
    assert names(choose(two_gpus(120, 120), pods, priority=11, units=79)) == {"b1"}


def test_a_low_priority_pod_never_preempts() -> None:
    pods = [pod("a1", A, 100, priority=1000), pod("b1", B, 100, priority=1000)]
    found = choose(two_gpus(100, 100), pods, priority=0, units=79, unit_mib=100)
    assert isinstance(found, Refusal)
    assert found.reason.startswith("evicting pods of priority below 0 frees 7900 MiB on no GPU: GPU 0 would")


def test_victims_spread_over_both_gpus_are_no_answer() -> None:
    """Node-level memory would free (40 + 40 units) but neither GPU alone gets 79 units free."""
    pods = [pod("a1", A, 40), pod("a2", A, 60, priority=100), pod("b1", B, 40), pod("b2", B, 60, priority=100)]
    found = choose(two_gpus(100, 100), pods, priority=50, units=79)
    assert isinstance(found, Refusal)
    assert "GPU 0 would still be 17 MiB short after evicting its 1 pod(s) of lower priority" in found.reason


def test_a_victim_on_another_gpu_is_never_part_of_the_set() -> None:
    pods = [pod("a1", A, 80), pod("b1", B, 10), pod("b2", B, 10)]
    found = choose(two_gpus(80, 122), pods, priority=5, units=100)
    assert names(found) == {"a1"}
    assert isinstance(found, Victims) and all(p.gpu == A for p in found.pods)


def test_a_set_that_violates_no_disruption_budget_wins_over_a_smaller_one_that_does() -> None:
    pods = [pod("a1", A, 100, protected=True), pod("b1", B, 50), pod("b2", B, 50)]
    found = choose(two_gpus(100, 100), pods, priority=5, units=79)
    assert names(found) == {"b1", "b2"}
    assert isinstance(found, Victims) and found.violations == 0
    # Where every set violates one, the fewest violations still win, then the fewest victims.
    pods = [pod("a1", A, 100, protected=True), pod("b1", B, 50, protected=True), pod("b2", B, 50, protected=True)]
    found = choose(two_gpus(100, 100), pods, priority=5, units=79)
    assert names(found) == {"a1"}
    assert isinstance(found, Victims) and found.violations == 1


def test_fewer_victims_then_lower_priority() -> None:
    pods = [pod("a1", A, 100, priority=3), pod("b1", B, 100, priority=1), pod("b2", B, 20, priority=0)]
    # One victim suffices on either GPU; b1's priority is lower.
    assert names(choose(two_gpus(120, 120), pods, priority=5, units=79)) == {"b1"}
    # Within one GPU: two small low pods or one larger pod of higher priority: one victim wins.
    pods = [pod("a1", A, 50, priority=0), pod("a2", A, 50, priority=0), pod("a3", A, 90, priority=4)]
    assert names(choose([Gpu(0, A, 190, 190)], pods, priority=5, units=90)) == {"a3"}
    # Two victims either way: the pair of lower priority.
    pods = [pod("a1", A, 50, 0), pod("a2", A, 50, 0), pod("a3", A, 45, 4), pod("a4", A, 45, 4)]
    assert names(choose([Gpu(0, A, 190, 190)], pods, priority=5, units=90)) == {"a1", "a2"}


def test_a_multi_gpu_request_frees_the_cheapest_gpus_and_only_those() -> None:
    gpus = [Gpu(0, "g0", 100, 100), Gpu(1, "g1", 100, 100), Gpu(2, "g2", 100, 60)]
    pods = [pod("p0", "g0", 100), pod("p1a", "g1", 50), pod("p1b", "g1", 50), pod("p2", "g2", 60)]
    # 80 units on each of two GPUs: g0 and g2 need one victim each, g1 two.
    assert names(choose(gpus, pods, priority=1, units=80, count=2)) == {"p0", "p2"}
    found = choose(gpus, pods, priority=1, units=80, count=3)
    assert names(found) == {"p0", "p1a", "p1b", "p2"}
    refused = choose(gpus, [pod("p0", "g0", 100)], priority=1, units=80, count=2)
    assert isinstance(refused, Refusal) and "frees 80 MiB on 1 GPU(s), 2 needed" in refused.reason


def test_a_gpu_that_fits_already_needs_no_victim_and_an_unhealthy_one_is_never_freed() -> None:
    assert names(choose(two_gpus(0, 122), [pod("b1", B, 122)], priority=5, units=79)) == set()
    gpus = [Gpu(0, A, 122, 122, healthy=False), Gpu(1, B, 122, 122)]
    found = choose(gpus, [pod("a1", A, 122)], priority=5, units=79)
    assert isinstance(found, Refusal) and "GPU 0 is unhealthy" in found.reason
    found = choose(two_gpus(0, 0), [], priority=5, units=130)
    assert isinstance(found, Refusal) and "GPU 0 has 122 MiB in all" in found.reason


def test_a_compute_share_must_be_freed_too() -> None:
    gpus = [Gpu(0, A, 122, 60, cores=100, cores_used=90), Gpu(1, B, 122, 100, cores=100, cores_used=50)]
    pods = [pod("a1", A, 60, cores=90), pod("b1", B, 50, cores=25), pod("b2", B, 50, cores=25)]
    # 50 units and 40 %: a has the memory but 10 % free (a1 frees both); b needs one pod for either.
    assert names(choose(gpus, pods, priority=5, units=50, cores=40)) == {"a1"}
    found = choose(gpus, [pod("b1", B, 50, cores=25)], priority=5, units=50, cores=80)
    assert isinstance(found, Refusal) and "GPU 1 would still be 5 % compute short" in found.reason


def by_definition(gpus: list[Gpu], pods: list[Resident], priority: int, units: int) -> tuple[int, int, int] | None:
    """The best (violations, victims, highest victim priority) over every subset of one GPU."""
    best = None
    for gpu in gpus:
        lower = [p for p in pods if p.gpu == gpu.uuid and p.priority < priority]
        for size in range(len(lower) + 1):
            for pick in itertools.combinations(lower, size):
                if gpu.units - gpu.used + sum(p.units for p in pick) >= units:
                    key = (sum(p.protected for p in pick), size, max((p.priority for p in pick), default=0))
                    best = key if best is None else min(best, key)
    return best


def test_the_rule_finds_the_best_set_on_random_nodes() -> None:
    rng = random.Random(42)  # noqa: S311 - reproducible cases, not secrets
    for _case in range(400):
        gpus = [Gpu(i, f"g{i}", 100, 0) for i in range(rng.randint(1, 3))]
        pods = []
        used = {g.uuid: 0 for g in gpus}
        for n in range(rng.randint(0, 7)):
            gpu = rng.choice(gpus)
            size = rng.randint(5, 60)
            if used[gpu.uuid] + size <= 100:
                used[gpu.uuid] += size
                pods.append(pod(f"p{n}", gpu.uuid, size, rng.randint(0, 3), protected=rng.random() < 0.3))
        gpus = [Gpu(g.index, g.uuid, g.units, used[g.uuid]) for g in gpus]
        priority, need = rng.randint(0, 4), rng.randint(10, 100)
        found = choose(gpus, pods, priority=priority, units=need)
        expected = by_definition(gpus, pods, priority, need)
        if expected is None:
            assert isinstance(found, Refusal), (gpus, pods, priority, need)
            continue
        assert isinstance(found, Victims), (found, gpus, pods, priority, need)
        (gpu,) = found.gpus
        assert all(p.gpu == gpu.uuid and p.priority < priority for p in found.pods)
        assert gpu.units - gpu.used + sum(p.units for p in found.pods) >= need
        top = max((p.priority for p in found.pods), default=0)
        assert (found.violations, len(found.pods), top) == expected, (gpus, pods, priority, need)


def test_a_budget_selects_pods_as_kube_scheduler_reads_label_selectors() -> None:
    labels = {"app": "infer", "tier": "gold"}
    assert selects({"matchLabels": {"app": "infer"}}, labels)
    assert not selects({"matchLabels": {"app": "batch"}}, labels)
    assert not selects({}, labels) and not selects(None, labels)  # an empty selector selects nothing
    assert selects({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}, labels)
    assert not selects({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, labels)
    assert selects({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "app", "operator": "Like"}]}, labels)
