"""One size grammar (contract/contract.yml, sizes): the filter the roles use and the modules read the
same strings alike, and pass the conformance vectors of contract/sizes.def, which libvgpu's C parser
(tests/unit.c) and the components' copy of this parser (files/components/tests/test_quota_file.py)
pass too.

The rule (docs/variables.md): a whole number of MiB, or a string with a binary suffix, either the
IEC one (MiB, GiB, TiB) or Kubernetes' (Mi, Gi, Ti), in any letter case. Decimal suffixes are
ambiguous and refused, as are KiB (below the granularity of a quota) and negatives; zero is a size,
which each use may refuse by its minimum.
"""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vgpu.isolation.plugins.filter.memory import mib
from ansible_collections.vgpu.isolation.plugins.module_utils.memory_size import parse_mib, read_mib

from contract import vectors

# What YAML gives besides strings: a whole number of MiB is a size; a bool, a float or a negative is none.
NUMBERS = [(3000, 3000), (0, 0), (17592186044415, 17592186044415)]
NOT_SIZES = [True, 1.5, None, [3000], -5, 17592186044416]


@pytest.mark.parametrize("vector", vectors.ACCEPTED, ids=repr)
def test_every_accepted_spelling_of_the_vectors_reads_alike(vector):
    assert read_mib(vector.text) == (vector.mib, "")
    assert parse_mib(vector.text, "q", minimum=0) == vector.mib
    assert mib(vector.text, "q", 0) == vector.mib


@pytest.mark.parametrize("vector", vectors.REFUSED, ids=repr)
def test_every_refused_spelling_of_the_vectors_is_refused_for_its_reason(vector):
    assert read_mib(vector.text) == (None, vector.reason)
    with pytest.raises(ValueError, match="expected a whole number of MiB"):
        parse_mib(vector.text, "q", minimum=0)
    with pytest.raises(AnsibleFilterError):
        mib(vector.text, "q", 0)


@pytest.mark.parametrize(("value", "expected"), NUMBERS)
def test_a_whole_number_is_a_size_in_mib(value, expected):
    assert parse_mib(value, minimum=0) == expected


@pytest.mark.parametrize("value", NOT_SIZES, ids=repr)
def test_other_values_are_refused(value):
    with pytest.raises(ValueError):
        parse_mib(value, minimum=0)


def test_a_quota_refuses_zero_where_a_reserve_takes_it():
    assert parse_mib("0MiB", "vgpu_reserved_memory_mib", minimum=0) == 0
    with pytest.raises(ValueError, match="must be greater than 0 MiB"):
        parse_mib("0MiB", "vgpu_sample_app_quota")


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
