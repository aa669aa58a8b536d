"""The quota file as cgpu-monitor reads it (quota_file.py), with the one size grammar: the components'
copy of the parser (vgpu_components.memory_size, generated from the collection's) passes the
conformance vectors of contract/sizes.def, as libvgpu's C parser and the collection's filter do."""

from __future__ import annotations

import re

import pytest
from vgpu_components import memory_size, quota_file

from contract import vectors

MIB = 1024 * 1024


@pytest.mark.parametrize("vector", vectors.ACCEPTED, ids=repr)
def test_every_accepted_spelling_is_the_quota_libvgpu_enforces(vector: vectors.Vector) -> None:
    mib = vector.mib
    assert mib is not None and memory_size.read_mib(vector.text) == (mib, "")
    if mib == 0:  # a quota must hold something: libvgpu refuses a zero memory_limit too
        with pytest.raises(quota_file.QuotaFileError, match="memory_limit"):
            quota_file.quota_bytes(f"memory_limit={vector.text}")
    else:
        assert quota_file.quota_bytes(f"memory_limit={vector.text}\n") == mib * MIB
        assert quota_file.quota_bytes(f"memory_limit=0:{vector.text},1:1GiB") == mib * MIB


@pytest.mark.parametrize("vector", vectors.REFUSED, ids=repr)
def test_every_refused_spelling_makes_the_quota_file_unreadable(vector: vectors.Vector) -> None:
    assert memory_size.read_mib(vector.text) == (None, vector.reason)
    with pytest.raises(ValueError, match="is not a size"):
        quota_file.parse_memory_limit(vector.text)
    with pytest.raises(ValueError, match="is not a size"):
        quota_file.parse_memory_limit(f"0:{vector.text}")


def test_a_quota_file_without_a_memory_limit_or_with_a_line_of_another_form_is_refused() -> None:
    with pytest.raises(quota_file.QuotaFileError, match=re.escape("quota.conf has no memory_limit line")):
        quota_file.quota_bytes("limit=1\n", "quota.conf")
    with pytest.raises(
        quota_file.QuotaFileError, match=re.escape("quota.conf line 2: 'memory_limit' is not key=value")
    ):
        quota_file.quota_bytes("limit=1\nmemory_limit\n", "quota.conf")


def test_a_device_not_listed_has_no_quota_and_a_device_named_twice_is_refused() -> None:
    assert quota_file.quota_bytes("memory_limit=1:3000MiB") is None
    with pytest.raises(quota_file.QuotaFileError, match="names device 0 twice"):
        quota_file.quota_bytes("memory_limit=0:1GiB,0:2GiB")
