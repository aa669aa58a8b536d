# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt),
# or, as the components' copy of it, Apache License 2.0 (see LICENSES/Apache-2.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later OR Apache-2.0
"""Memory sizes: the one Python parser of the size grammar (contract/contract.yml, sizes).

The collection's filters (on the controller) and modules (on the nodes) import it from module_utils;
contract/generate.py copies it into the components' package (vgpu_components.memory_size), where the
monitor reads quota files with it. libvgpu's C parser reads the same grammar, and all of them pass
the conformance vectors of contract/sizes.def.

A size is a whole number of MiB (3000) or a string: blanks, ASCII digits, blanks, a binary suffix in
any letter case (MiB, GiB, TiB or Kubernetes' Mi, Gi, Ti; none means MiB), blanks. Decimal suffixes
(MB, G) are refused because they are ambiguous, KiB because sizes count whole MiB, and a size whose
bytes do not fit in 64 bits (libvgpu counts bytes). Zero is a size: each use states its minimum.
"""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.vgpu.isolation.plugins.module_utils.contract import (
    SIZE_BELOW_MIB,
    SIZE_DECIMAL,
    SIZE_EXPECTED,
    SIZE_MAX_MIB,
    SIZE_MIB_PER_SUFFIX,
)

EXPECTED = SIZE_EXPECTED
MIB = 1024 * 1024
_SIZE = re.compile(r"[ \t]*([0-9]+)[ \t]*([A-Za-z]*)[ \t]*")
_MAX_DIGITS = len(str(SIZE_MAX_MIB))
# Why a size is refused (contract/sizes.def names the same reasons), as the message says it.
_WHY = {
    "form": "is not a memory size",
    "unit": "has an unknown unit",
    "decimal": "has an unknown unit (decimal units are ambiguous; write MiB or GiB)",
    "below_mib": "has an unknown unit (sizes are counted in whole MiB; write MiB or GiB)",
    "overflow": f"is more than the largest memory size, {SIZE_MAX_MIB} MiB",
}


def read_mib(value: Any) -> tuple[int | None, str]:
    """(MiB, "") for a size of the grammar; (None, why) otherwise, why one of form, unit (letters that
    are no suffix), decimal, below_mib or overflow. A negative int is returned as it is (see minimum)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return None, "form"
    if isinstance(value, int):
        number, factor = value, 1
    else:
        match = _SIZE.fullmatch(value)
        if match is None:
            return None, "form"
        digits, suffix = match.group(1).lstrip("0") or "0", match.group(2).lower()
        if suffix not in SIZE_MIB_PER_SUFFIX:
            return None, "decimal" if suffix in SIZE_DECIMAL else "below_mib" if suffix in SIZE_BELOW_MIB else "unit"
        if len(digits) > _MAX_DIGITS:
            return None, "overflow"  # before int(): a long string of digits is refused, not converted
        number, factor = int(digits), SIZE_MIB_PER_SUFFIX[suffix]
    if number * factor > SIZE_MAX_MIB:
        return None, "overflow"
    return number * factor, ""


def parse_mib(value: Any, name: str = "memory size", minimum: int = 1) -> int:
    """``value`` in MiB; ValueError naming ``name``, the value and the expected form otherwise.

    ``minimum`` is the smallest size accepted: 1 for sizes that must hold something (quotas), 0 for
    amounts that may be nothing (the reserved memory).
    """
    mib, why = read_mib(value)
    if mib is None:
        raise ValueError(f"{name}: {value!r} {_WHY[why]}; expected {EXPECTED}")
    if mib < minimum:
        bound = "greater than 0 MiB" if minimum == 1 else f"at least {minimum} MiB"
        raise ValueError(f"{name}: {value!r} must be {bound}; expected {EXPECTED}")
    return mib


def units_for(total_mib: int, reserved_mib: int, unit_mib: int) -> int:
    """The units a GPU of ``total_mib`` offers: floor((total - reserved) / unit), never negative.

    The remainder is left unused, so any GPU size works with any unit. The components count a GPU's
    units with this function too (their generated copy of this module).
    """
    return max(0, (total_mib - reserved_mib) // unit_mib)
