"""One rule for memory sizes: the filter the roles use and the modules read the same strings alike.

The rule (docs/variables.md): a whole number of MiB, or a string with a binary suffix, either the
IEC one (MiB, GiB, TiB) or Kubernetes' (Mi, Gi, Ti), in any letter case. Decimal suffixes are
ambiguous and refused, as are KiB (below the granularity of a quota), zero and negatives.
"""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.memory import mib
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib

ACCEPTED = [
    (3000, 3000),
    ("3000", 3000),
    ("3000MiB", 3000),
    ("3000Mi", 3000),
    ("3GiB", 3072),
    ("3Gi", 3072),
    (" 12 gib ", 12288),
    ("1TiB", 1048576),
    ("1Ti", 1048576),
]
REFUSED = ["3000MB", "3G", "3GB", "0", 0, -5, "-5MiB", "512KiB", "512Ki", True, "lots", "", "1.5GiB"]


@pytest.mark.parametrize(("value", "expected"), ACCEPTED)
def test_the_filter_and_the_modules_read_a_size_alike(value, expected):
    assert mib(value, "q") == expected
    assert parse_mib(value) == expected


@pytest.mark.parametrize("value", REFUSED)
def test_the_filter_and_the_modules_refuse_a_size_alike(value):
    with pytest.raises(AnsibleFilterError):
        mib(value, "q")
    with pytest.raises(ValueError):
        parse_mib(value)


def test_a_refusal_names_the_setting_the_value_and_the_expected_form():
    with pytest.raises(ValueError) as err:
        parse_mib("3GB", "vgpu_sample_app_quota")
    assert str(err.value) == (
        "vgpu_sample_app_quota: '3GB' has an unknown unit (decimal units are ambiguous; write MiB or GiB); "
        "expected a whole number of MiB (3000) or a string with a binary suffix ('3000MiB', '3GiB' or '3Gi')"
    )


def test_an_amount_that_may_be_nothing_accepts_zero_but_not_less():
    assert parse_mib("0MiB", "vgpu_reserved_memory_mib", minimum=0) == 0
    with pytest.raises(ValueError, match="must be at least 0 MiB"):
        parse_mib(-1, "vgpu_reserved_memory_mib", minimum=0)
