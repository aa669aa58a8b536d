"""The one Kubernetes quantity parser (quantity.py): the DRA path's capacities and the extender's
extended resources."""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Any

import pytest
from vgpu_components import quantity
from vgpu_components.quantity import parse_quantity

from contract import vectors


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8000Mi", 8000 * 2**20),
        ("12Gi", 12 * 2**30),
        ("1e3", 1000),
        ("1E-2", Fraction(1, 100)),
        ("500M", 500 * 10**6),
        ("1.5Gi", 3 * 2**29),
        (".5Ki", 512),
        ("100m", Fraction(1, 10)),
        ("+30", 30),
        ("-1", -1),
        ("8388608000", 8000 * 2**20),
    ],
)
def test_quantities_are_read_exactly(text: str, value: Fraction) -> None:
    assert quantity.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Mi", "8000MiB", "12 Gi", "1e", "abc", "1.2.3", "\u0663", "1" * 65, None, 30])
def test_a_bad_quantity_is_named(text: Any) -> None:
    with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
        quantity.parse_quantity(text)


def test_a_huge_exponent_is_refused_before_any_arithmetic() -> None:
    started = time.process_time()
    for text in ("1e999999999", "9E99", "1e-999999999"):
        with pytest.raises(ValueError, match="is not a Kubernetes quantity"):
            quantity.parse_quantity(text)
    assert time.process_time() - started < 1


@pytest.mark.parametrize(
    ("value", "units"),
    [("30", 30), ("007", 7), (30, 30), ("1k", 1000), ("1Ki", 1024), ("0", 0), ("3e2", 300), ("+5", 5)],
)
def test_whole_numbers_of_units(value: Any, units: int) -> None:
    assert quantity.whole_number(value, "container 'c' vgpu.io/gpu-memory", 10**12) == units


@pytest.mark.parametrize(
    "value", ["lots", "1.5", "100m", "-1", -1, True, None, "2Ti", 10**12 + 1, "1e13", "1000000000001", "9" * 65, "٣"]
)
def test_anything_but_a_whole_number_of_units_in_range_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match=r"container 'c' vgpu.io/gpu-memory: expected a whole number of units"):
        quantity.whole_number(value, "container 'c' vgpu.io/gpu-memory", 10**12)


KUBERNETES_SPELLINGS = [
    v for v in vectors.ACCEPTED if re.fullmatch(r"[0-9]+(Mi|Gi|Ti)?", v.text) and (v.text[-1] == "i" or v.mib == 0)
]


@pytest.mark.parametrize("vector", KUBERNETES_SPELLINGS, ids=repr)
def test_a_size_spelt_as_kubernetes_spells_it_is_the_same_quantity(vector: vectors.Vector) -> None:
    """The size grammar (contract/sizes.def) and Kubernetes' quantities overlap where a size has a
    Kubernetes suffix (the DRA driver publishes "<n>Mi", the API server returns "8Gi"): there the two
    readers agree. A plain number is MiB to the grammar and bytes to Kubernetes, so only 0 is both."""
    assert vector.mib is not None
    assert parse_quantity(vector.text) == vector.mib * 2**20
