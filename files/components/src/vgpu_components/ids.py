"""The device ID and allocation ID contracts (docs/architecture.md).

Device ID: `<gpu-key>-<n>`, gpu-key = first 6 hex digits of SHA-256(GPU UUID), n = unit number.
Share ID (<prefix>/gpu-cores): `cores-<n>`, one percent of a GPU's SMs, not tied to a GPU.
alloc-id: first 16 hex digits of SHA-256 of the sorted, comma-joined device IDs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

KEY_LEN = 6
ALLOC_ID_LEN = 16
_DEVICE_ID = re.compile(r"^([0-9a-f]{6})-(0|[1-9][0-9]*)$")
SHARE_PREFIX = "cores-"
_SHARE_ID = re.compile(r"^cores-(0|[1-9][0-9]*)$")


def gpu_key(uuid: str) -> str:
    return hashlib.sha256(uuid.encode()).hexdigest()[:KEY_LEN]


def device_id(key: str, unit: int) -> str:
    return f"{key}-{unit}"


def parse_device_id(device: str) -> tuple[str, int]:
    """(gpu-key, unit number) of a device ID; ValueError naming the ID when it is not one of ours."""
    match = _DEVICE_ID.match(device)
    if not match:
        raise ValueError(f"device ID {device!r} is not of the form <6 hex digits>-<unit number>")
    return match.group(1), int(match.group(2))


def share_id(n: int) -> str:
    return f"{SHARE_PREFIX}{n}"


def parse_share_id(device: str) -> int:
    """The number of a share ID; ValueError naming the ID when it is not one of ours."""
    match = _SHARE_ID.match(device)
    if not match:
        raise ValueError(f"device ID {device!r} is not of the form cores-<number>")
    return int(match.group(1))


def alloc_id(device_ids: Iterable[str]) -> str:
    joined = ",".join(sorted(device_ids))
    return hashlib.sha256(joined.encode()).hexdigest()[:ALLOC_ID_LEN]


def is_alloc_id(text: str) -> bool:
    """Whether text has the form alloc_id gives (ALLOC_ID_LEN lowercase hex digits)."""
    return len(text) == ALLOC_ID_LEN and all(c in "0123456789abcdef" for c in text)
