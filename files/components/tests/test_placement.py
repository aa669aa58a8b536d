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
