"""The mib filter: how an operator's memory sizes are read, and which are refused."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.memory import FilterModule, gpu_units, mib


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3000, 3000), ("3000", 3000), ("3000MiB", 3000), ("3GiB", 3072), (" 12 gib ", 12288), ("1TiB", 1048576)],
)
def test_sizes_in_binary_units_are_read_as_mib(value, expected):
    assert mib(value, "q") == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("3000MB", "decimal units are ambiguous"),
        ("3G", "decimal units are ambiguous"),
        (-1, "must be greater than 0"),
        ("-1", "is not a memory size"),
        (0, "must be greater than 0"),
        ("lots", "is not a memory size"),
        (True, "is not a memory size"),
        ("3 parsecs", "unknown unit"),
    ],
)
def test_bad_sizes_are_refused_with_the_variable_and_value_named(value, fragment):
    with pytest.raises(AnsibleFilterError) as err:
        mib(value, "vgpu_sample_app_quota")
    message = str(err.value)
    assert message.startswith("vgpu_sample_app_quota: ")
    assert repr(value) in message
    assert fragment in message
    assert "3000MiB" in message  # says what is expected


def test_an_amount_that_may_be_nothing_takes_a_minimum_of_zero():
    assert mib("0", "vgpu_reserved_memory_mib", 0) == 0
    with pytest.raises(AnsibleFilterError, match="greater than 0"):
        mib("0", "vgpu_sample_app_quota")


def test_the_plugin_exposes_the_filter():
    assert set(FilterModule().filters()) == {"mib", "gpu_units"}


# --- whole units of real GPUs (issue 25 item 3) --------------------------------------------------
# What nvidia-smi shows (memory.total) on each model: none a round number of units.
REAL_GPUS = {
    "T4": 15360,
    "A10": 23028,
    "L4": 23034,
    "A100 40GB": 40960,
    "A100 80GB": 81920,
    "H100 80GB": 81559,
    "H200": 143771,
}


def test_the_summary_counts_each_gpu_s_units_by_the_components_rule():
    """The per-node summary (gpu_units, module_utils units_for) counts what the device plugin, the
    extender and the DRA driver count (the components carry a copy of module_utils/memory_size.py,
    generated: files/components/tests/test_units.py)."""
    for total in REAL_GPUS.values():
        for unit in (100, 256, 512, 1000, 1024):
            for reserved in (0, 512, 2048):
                gpu = {"index": 0, "name": "x", "memory_total_mib": total}
                (view,) = gpu_units([gpu], unit, reserved)
                assert view["units"] == (total - reserved) // unit
                assert view["usable_mib"] + view["reserved_mib"] + view["unused_mib"] == total
                assert 0 <= view["unused_mib"] < unit


def test_the_summary_shows_an_a10_s_unused_remainder():
    (view,) = gpu_units([{"index": 0, "name": "NVIDIA A10", "memory_total_mib": 23028}], "256MiB", "512Mi")
    assert view == {
        "index": 0,
        "name": "NVIDIA A10",
        "total_mib": 23028,
        "units": 87,
        "usable_mib": 22272,
        "reserved_mib": 512,
        "unused_mib": 244,
    }


def test_a_gpu_the_driver_reports_no_memory_for_is_left_out():
    assert gpu_units([{"index": 0, "name": "x", "memory_total_mib": None}], 100) == []
