"""placement.py: one rule for the extender and the device plugin, checked on every free pattern."""

from __future__ import annotations

import itertools

import pytest
from fakes import node_obj
from vgpu_components.allocator import DeviceTable
from vgpu_components.nvml import Gpu
from vgpu_components.placement import Ranking
from vgpu_components.scheduling import ClusterModel


def best_fit_by_definition(frees: tuple[int, ...], need: int) -> int | None:
    """The rule as docs state it: the least free that fits, ties to the lowest index."""
    fitting = [(free, index) for index, free in enumerate(frees) if free >= need]
    return min(fitting)[1] if fitting else None


PATTERNS = list(itertools.product([0, 5, 20, 21, 50, 122], repeat=3))
NEEDS = (1, 5, 20, 21, 50, 100, 122)


def test_ranking_picks_the_least_free_gpu_that_fits() -> None:
    for frees in PATTERNS:
        ranking = Ranking((free, index, index) for index, free in enumerate(frees))
        for need in NEEDS:
            assert ranking.pick(need) == best_fit_by_definition(frees, need), (frees, need)
        assert ranking.max_free == max(frees)
        assert ranking.largest == frees.index(max(frees))


def test_the_extender_and_the_device_plugin_place_by_that_rule() -> None:
    gpus = [Gpu(uuid=f"GPU-{i}", index=i, total_mib=12200) for i in range(3)]
    table = DeviceTable(gpus, unit_mib=100)
    keys = [slot.key for slot in table.gpus()]
    for frees in PATTERNS:
        model = ClusterModel("vgpu.io")
        model.set_node(node_obj("n", [(f"GPU-{i}", 12200, 122 - free) for i, free in enumerate(frees)]))
        available = [f"{keys[i]}-{unit}" for i, free in enumerate(frees) for unit in range(free)]
        for need in NEEDS:
            expected = best_fit_by_definition(frees, need)
            fit = model.fit("n", need)
            assert (fit.gpu.index if fit.gpu else None) == expected, (frees, need)
            if expected is not None:
                picked = table.preferred(available, [], need)
                assert {d.split("-")[0] for d in picked} == {keys[expected]}, (frees, need)


def test_an_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown placement policy 'worst-fit'; expected one of \\['best-fit'\\]"):
        Ranking((), policy="worst-fit")


def rule_by_definition(frees: tuple[int, ...], compute: tuple[int, ...], need: int) -> int | None:
    """The rule with compute shares, as docs state it: among the GPUs where the memory fits, the
    most compute free; among those equally free, best-fit's choice."""
    fitting = [index for index, free in enumerate(frees) if free >= need]
    if not fitting:
        return None
    most = max(compute[i] for i in fitting)
    return min((frees[i], i) for i in fitting if compute[i] == most)[1]


COMPUTE = list(itertools.product([0, 30, 100], repeat=3))


def test_with_compute_free_the_gpu_with_the_most_of_it_wins_among_those_where_the_memory_fits() -> None:
    for frees in PATTERNS[::7]:
        for compute in COMPUTE:
            ranking = Ranking(((free, index, index) for index, free in enumerate(frees)), compute=compute.__getitem__)
            for need in NEEDS:
                assert ranking.pick(need) == rule_by_definition(frees, compute, need), (frees, compute, need)


def test_with_compute_shares_the_extender_and_the_device_plugin_still_agree() -> None:
    """The extender's choice is what the device plugin's GetPreferredAllocation will take, given the
    compute its ledger has taken per GPU (the same numbers the node annotation carries)."""
    gpus = [Gpu(uuid=f"GPU-{i}", index=i, total_mib=12200) for i in range(3)]
    table = DeviceTable(gpus, unit_mib=100)
    keys = [slot.key for slot in table.gpus()]
    for frees in PATTERNS[::5]:
        for compute in COMPUTE:
            model = ClusterModel("vgpu.io")
            used = [(f"GPU-{i}", 12200, 122 - free) for i, free in enumerate(frees)]
            model.set_node(node_obj("n", used, cores=[(100, 100 - c) for c in compute]))
            available = [f"{keys[i]}-{unit}" for i, free in enumerate(frees) for unit in range(free)]
            compute_free = {keys[i]: c for i, c in enumerate(compute)}
            for need in NEEDS:
                expected = rule_by_definition(frees, compute, need)
                fit = model.fit("n", need, cores=1)
                placed = model.nodes["n"].ranking.pick(need)
                assert (placed.index if placed else None) == expected, (frees, compute, need)
                if expected is None:
                    continue
                assert (fit.gpu is not None) == (compute[expected] >= 1), (frees, compute, need, fit.reason)
                picked = table.preferred(available, [], need, compute_free)
                assert {d.split("-")[0] for d in picked} == {keys[expected]}, (frees, compute, need)
