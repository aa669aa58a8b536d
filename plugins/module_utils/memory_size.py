# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Memory sizes of the inventory contract (docs/variables.md): the one parser of the collection.

The rule: a whole number of MiB (``3000``), or a string with a binary suffix, either the IEC one
(``3000MiB``, ``3GiB``, ``1TiB``) or Kubernetes' (``3000Mi``, ``3Gi``, ``1Ti``), in any letter case.
Decimal suffixes (``MB``, ``G``) are refused because they are ambiguous, ``KiB`` because a quota
is counted in MiB. The filters (on the controller) and the modules (on the nodes) both call it.
"""

from __future__ import annotations

import re
from typing import Any

EXPECTED = "a whole number of MiB (3000) or a string with a binary suffix ('3000MiB', '3GiB' or '3Gi')"

_SIZE = re.compile(r"^\s*(\d+)\s*([A-Za-z]*)\s*$")
_MIB_PER_SUFFIX = {"": 1, "mi": 1, "mib": 1, "gi": 1024, "gib": 1024, "ti": 1 << 20, "tib": 1 << 20}
_BELOW_MIB = ("ki", "kib")
_DECIMAL = ("b", "k", "kb", "m", "mb", "g", "gb", "t", "tb")


def parse_mib(value: Any, name: str = "memory size", minimum: int = 1) -> int:
    """``value`` in MiB; ValueError naming ``name``, the value and the expected form otherwise.

    ``minimum`` is the smallest size accepted: 1 for sizes that must hold something (quotas), 0 for
    amounts that may be nothing (the reserved memory).
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is not a memory size; expected {EXPECTED}")
    if isinstance(value, int):
        mib = value
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError(f"{name}: {value!r} is not a memory size; expected {EXPECTED}")
        number, suffix = int(match.group(1)), match.group(2).lower()
        if suffix not in _MIB_PER_SUFFIX:
            if suffix in _BELOW_MIB:
                hint = " (sizes are counted in whole MiB; write MiB or GiB)"
            elif suffix in _DECIMAL:
                hint = " (decimal units are ambiguous; write MiB or GiB)"
            else:
                hint = ""
            raise ValueError(f"{name}: {value!r} has an unknown unit{hint}; expected {EXPECTED}")
        mib = number * _MIB_PER_SUFFIX[suffix]
    if mib < minimum:
        bound = "greater than 0 MiB" if minimum == 1 else f"at least {minimum} MiB"
        raise ValueError(f"{name}: {value!r} must be {bound}; expected {EXPECTED}")
    return mib


def units_for(total_mib: int, reserved_mib: int, unit_mib: int) -> int:
    """The units a GPU of ``total_mib`` offers: floor((total - reserved) / unit), never negative.

    The remainder is left unused, so any GPU size works with any unit. The components count a GPU's
    units by the same rule (files/components ids.units_for; a unit test keeps the two equal).
    """
    return max(0, (total_mib - reserved_mib) // unit_mib)
