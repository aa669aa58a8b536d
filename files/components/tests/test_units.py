"""GPU memory in whole units (issue 25 item 3): real GPUs are no round number of units.

Each GPU offers floor((memory - reserved) / unit) units and leaves the remainder unused. The device
plugin advertises that many, the extender reads them from its annotation and places a request of
exactly that size there and no larger one, and the DRA driver's ResourceSlice offers the same memory.
The sizes are what nvidia-smi shows (memory.total) on each model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import make_config
from vgpu_components import dra
from vgpu_components.nvml import Gpu
from vgpu_components.plugin import DevicePlugin
from vgpu_components.scheduling import ClusterModel

REAL_GPUS = {
    "T4": 15360,
    "A10": 23028,
    "L4": 23034,
    "A100 40GB": 40960,
    "A100 80GB": 81920,
    "H100 80GB": 81559,
    "H200": 143771,
}
UNITS = (100, 256, 512, 1024)


def expected_units(total: int, reserved: int, unit: int) -> int:
    return (total - reserved) // unit


@pytest.mark.parametrize("reserved", [0, 512])
@pytest.mark.parametrize("unit", UNITS)
def test_the_device_plugin_the_extender_and_the_dra_slice_count_the_same_whole_units(
    short_tmp: Path, unit: int, reserved: int
) -> None:
    """One node with every model (mixed models, one unit): what the device plugin publishes is what
    the extender places by, and what the DRA driver offers."""
    gpus = [
        Gpu(uuid=f"GPU-{i:08d}", index=i, total_mib=total, name=name)
        for i, (name, total) in enumerate(REAL_GPUS.items())
    ]
    cfg = make_config(short_tmp)
    cfg["unit_mib"], cfg["reserved_mib"] = unit, reserved
    annotation = DevicePlugin(cfg, gpus, "node-a").publisher.annotation({})

    model = ClusterModel("vgpu.io")
    model.set_node({"metadata": {"name": "node-a", "annotations": {"vgpu.io/gpus": annotation}}})
    placed = {gpu.uuid: gpu.units for gpu in model.nodes["node-a"].gpus}
    slice_memory = {
        device["attributes"]["uuid"]["string"]: device["capacity"][dra.CAPACITY]["value"]
        for device in dra.resource_slice("node-a", gpus, cfg, generation=1)["spec"]["devices"]
    }
    for gpu in gpus:
        units = expected_units(gpu.total_mib, reserved, unit)
        assert placed[gpu.uuid] == units, gpu.name
        assert slice_memory[gpu.uuid] == f"{units * unit}Mi", gpu.name


@pytest.mark.parametrize("model", REAL_GPUS)
def test_a_request_of_every_unit_of_a_gpu_fits_and_one_more_does_not(short_tmp: Path, model: str) -> None:
    total, unit = REAL_GPUS[model], 256
    gpu = Gpu(uuid="GPU-1", index=0, total_mib=total, name=model)
    cfg = make_config(short_tmp)
    cfg["unit_mib"] = unit
    cluster = ClusterModel("vgpu.io")
    annotation = DevicePlugin(cfg, [gpu], "n").publisher.annotation({})
    cluster.set_node({"metadata": {"name": "n", "annotations": {"vgpu.io/gpus": annotation}}})
    ranking = cluster.nodes["n"].ranking
    units = expected_units(total, 0, unit)
    assert units * unit <= total < (units + 1) * unit, "the remainder is less than a unit"
    assert ranking.pick(units) is not None
    assert ranking.pick(units + 1) is None
