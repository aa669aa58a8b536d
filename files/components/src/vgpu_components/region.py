"""Lock-free reader of the interposer's per-container `vgpu.region` file (format version 1).

The layout is specified in files/libvgpu/docs/region-format.md. The monitor reads the header and
device records (the first 4096 bytes) bracketed by the writer's sequence counter; a torn or
unready read is retried a few times and then skipped: it costs one sample, never a crash.

The file lives in a folder the container writes, so the reader trusts nothing about it: it opens
without following a symlink and without blocking (a FIFO would block the open forever), and
reads only a regular file.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from vgpu_components import layout

MAGIC = 0x55504756
VERSION = 1
HEADER_SIZE = 4096
DEVICE_SIZE = 128
MAX_DEVICES = 16
SLOT_SIZE = 1024
MAX_SLOTS = 1024
FILE_SIZE = HEADER_SIZE + SLOT_SIZE * MAX_SLOTS
DEVICES_OFFSET = 1024
SEQ_OFFSET = 40
STATE_READY = 1

HEADER = struct.Struct("<IIIIIIIIQQQIIQQII")
DEVICE = struct.Struct("<QQQQQQQQQQQQ16sII")
SEQ = struct.Struct("<Q")


class RegionError(ValueError):
    """The file is not a region this reader understands (wrong magic, version or sizes)."""


class RegionBusy(RuntimeError):
    """Writers kept the region changing during every attempt: skip this sample."""


@dataclass(frozen=True)
class DeviceUsage:
    index: int
    limit_bytes: int
    used_bytes: int
    ctx_bytes: int
    peak_bytes: int
    live_buffers: int
    oom_count: int
    uuid: bytes | None


@dataclass(frozen=True)
class RegionSample:
    created_ns: int
    updated_ns: int
    devices: list[DeviceUsage]


def _parse(buf: bytes) -> tuple[int, int, RegionSample]:
    """(seq, state, sample) from the first 4096 bytes; RegionError when the layout is foreign."""
    (
        magic,
        version,
        header_size,
        device_size,
        max_devices,
        slot_size,
        max_slots,
        state,
        file_size,
        seq,
        created_ns,
        _flags,
        device_count,
        _ctx_reserve,
        updated_ns,
        _lock_pid,
        _resets,
    ) = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise RegionError(f"bad magic 0x{magic:08x}, expected 0x{MAGIC:08x}")
    if version != VERSION:
        raise RegionError(f"region version {version}, this reader understands {VERSION}")
    layout = (header_size, device_size, max_devices, slot_size, max_slots, file_size)
    if layout != (HEADER_SIZE, DEVICE_SIZE, MAX_DEVICES, SLOT_SIZE, MAX_SLOTS, FILE_SIZE):
        raise RegionError(f"unexpected layout sizes {layout}")
    devices = []
    for index in range(min(device_count, MAX_DEVICES)):
        fields = DEVICE.unpack_from(buf, DEVICES_OFFSET + index * DEVICE_SIZE)
        limit, used, ctx, peak, live = fields[0], fields[1], fields[2], fields[3], fields[4]
        uuid_raw, uuid_valid, oom = fields[12], fields[13], fields[14]
        devices.append(DeviceUsage(index, limit, used, ctx, peak, live, oom, uuid_raw if uuid_valid == 1 else None))
    return seq, state, RegionSample(created_ns, updated_ns, devices)


def read(path: str | os.PathLike[str], attempts: int = 100) -> RegionSample | None:
    """One consistent sample, or None when the region is missing or still initialising.

    Raises RegionError for a file that is not a regular file holding a version-1 region and
    RegionBusy when no attempt got a consistent copy.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: a symlink; ENXIO: a socket
        raise RegionError(f"{path}: cannot open it as a regular file: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RegionError(f"{path}: not a regular file (mode {stat.filemode(info.st_mode)})")
        if info.st_size < FILE_SIZE:
            return None  # still being created
        for _attempt in range(attempts):
            before = SEQ.unpack(os.pread(fd, SEQ.size, SEQ_OFFSET))[0]
            if before % 2:
                time.sleep(0.001)
                continue
            buf = os.pread(fd, HEADER_SIZE, 0)
            if not any(buf[:4]):
                return None  # sized by the device plugin, not yet initialised by libvgpu
            after = SEQ.unpack(os.pread(fd, SEQ.size, SEQ_OFFSET))[0]
            seq, state, sample = _parse(buf)
            if before == after == seq and state == STATE_READY:
                return sample
            if state != STATE_READY:
                return None
        raise RegionBusy(f"{path}: no consistent read in {attempts} attempts")
    finally:
        os.close(fd)


def region_path(state_dir: str | os.PathLike[str], alloc_id: str) -> Path:
    return layout.region_file(state_dir, alloc_id)
