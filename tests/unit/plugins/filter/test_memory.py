"""The mib filter: how an operator's memory sizes are read, and which are refused."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.memory import FilterModule, mib


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
    assert set(FilterModule().filters()) == {"mib"}
