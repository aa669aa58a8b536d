"""A quota file as libvgpu reads it: the one source of a container's quota (docs/architecture.md,
"One quota per container"). The device plugin's Allocate and the DRA driver's prepare write it
(container.container_contract), libvgpu enforces it, and cgpu-monitor reads it here.

    # comments and blank lines
    memory_limit=3000MiB                 every CUDA ordinal of the container
    memory_limit=0:3000MiB,1:2000MiB     per ordinal; an ordinal not listed has no quota

Sizes follow the one size grammar (memory_size, contract/sizes.def), as libvgpu's config.c; a quota
must hold something, so zero is refused. The last memory_limit line wins, as in libvgpu.
"""

from __future__ import annotations

import os

from vgpu_components import layout
from vgpu_components.memory_size import MIB, parse_mib

MAX_DEVICES = 16  # libvgpu's VGPU_MAX_DEVICES: CUDA ordinals 0-15
EXPECTED = "expected e.g. 3000MiB, 3GiB or 0:3000MiB,1:2000MiB"


class QuotaFileError(ValueError):
    """A quota file libvgpu would refuse; the message names the file, the value and what is expected."""


def parse_size(text: str) -> int:
    """Bytes of one size of a memory_limit value; ValueError when libvgpu would refuse it."""
    try:
        return parse_mib(text, "size", minimum=1) * MIB
    except ValueError:
        raise ValueError(f"{text!r} is not a size: {EXPECTED}") from None


def parse_memory_limit(text: str) -> dict[int, int]:
    """libvgpu's memory_limit value as bytes per CUDA ordinal inside the container: one size for
    every device ("3000MiB") or "0:3000MiB,1:2000MiB" (a device not listed has no quota)."""
    if ":" not in text:
        return dict.fromkeys(range(MAX_DEVICES), parse_size(text))
    limits: dict[int, int] = {}
    for item in filter(None, text.split(",")):  # as strtok: empty items are skipped
        device, _colon, size = item.partition(":")
        if not device.isdigit() or not device.isascii() or int(device) >= MAX_DEVICES:
            raise ValueError(f"item {item!r} of {text!r}: expected <device 0-{MAX_DEVICES - 1}>:<size>, e.g. 0:3000MiB")
        if int(device) in limits:
            raise ValueError(f"{text!r} names device {int(device)} twice")
        limits[int(device)] = parse_size(size)
    return limits


def quota_bytes(text: str, where: str = "quota file") -> int | None:
    """The quota on the container's GPU (CUDA ordinal 0: the container sees one GPU) that a quota
    file's text gives; None when it sets none for that device. QuotaFileError when libvgpu would
    refuse it."""
    limits: dict[int, int] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        content = line.split("#", 1)[0].strip()
        if not content:
            continue
        key, sep, value = content.partition("=")
        if not sep:
            raise QuotaFileError(f"{where} line {number}: {content!r} is not key=value")
        if key.strip() == "memory_limit":
            try:
                limits = parse_memory_limit(value.strip())
            except ValueError as exc:
                raise QuotaFileError(f"{where} line {number}: memory_limit {exc}") from None
    if limits is None:
        raise QuotaFileError(f"{where} has no memory_limit line")
    return limits.get(0)


def read_quota_bytes(state_dir: str | os.PathLike[str], alloc_id: str) -> int | None:
    """The quota of an allocation, from the quota file the device plugin or the DRA driver wrote
    for it; None when the file is gone or sets no quota on the container's GPU. QuotaFileError when
    the file is not what libvgpu accepts."""
    path = layout.quota_path(state_dir, alloc_id)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise QuotaFileError(f"{path}: cannot be read ({exc})") from None
    return quota_bytes(text, str(path))
