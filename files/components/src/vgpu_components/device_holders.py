"""Which processes hold the GPU's device files, and which process a PID names now.

NVML lists GPU memory under the PID of the process that made it; the memory itself belongs to the
driver's file descriptors (/dev/nvidiactl, /dev/nvidia<N>, /dev/nvidia-uvm), which a forked child
keeps when its parent exits. So the processes that hold those files are the ones whose memory it
is (attribution.py states the rule), read from /proc/<pid>/fd: each descriptor is a link to the
file it opened. A PID alone names no process for long (it is reused once the process is gone):
a PID and its start time (/proc/<pid>/stat, field 22, clock ticks after boot) do.

Reading another process's /proc/<pid>/fd needs ptrace read access to it (CAP_SYS_PTRACE, which
cgpu-monitor's container adds for this and nothing else; it never calls ptrace): a process whose
descriptors cannot be read is counted (scan) or reported as unknown (process), never guessed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEVICE_PREFIX = "/dev/nvidia"  # nvidiactl, nvidia<N>, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset


@dataclass(frozen=True)
class Holder:
    """A process that holds one or more of the GPU's device files open."""

    pid: int
    start: int | None  # its start time (clock ticks after boot); None: unreadable
    devices: frozenset[str]  # the files, as named under /dev: nvidiactl, nvidia0, nvidia-uvm


@dataclass(frozen=True)
class Process:
    """What /proc says of a PID now."""

    start: int | None  # its start time; None: no such process (or unreadable)
    holds_gpu: bool | None  # holds one of the GPU's device files; None: cannot tell


def start_time(pid: int, proc: Path = Path("/proc")) -> int | None:
    """The start time of the process of this PID (field 22 of /proc/<pid>/stat), or None."""
    try:
        stat = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])  # after the command name: fields 3, 4, ...
    except (OSError, IndexError, ValueError):
        return None


def devices(pid: int, proc: Path = Path("/proc"), prefix: str = DEVICE_PREFIX) -> frozenset[str] | None:
    """The device files (names after /dev/) this process holds; None when its descriptors cannot
    be read; an empty set when it holds none (or is gone)."""
    folder = proc / str(pid) / "fd"
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return frozenset()
    except OSError:
        return None
    held = set()
    for name in names:
        try:
            target = os.readlink(folder / name)
        except OSError:
            continue  # closed since the listing
        if target.startswith(prefix):
            held.add(target.rsplit("/", 1)[-1])
    return frozenset(held)


def process(pid: int, proc: Path = Path("/proc"), prefix: str = DEVICE_PREFIX) -> Process:
    """Whether a process of this PID exists (its start time) and holds a GPU device file.
    A process folder without a readable stat or fd folder is unknown (None, None)."""
    if not (proc / str(pid)).is_dir():
        return Process(None, False)
    held = devices(pid, proc, prefix)
    if not (proc / str(pid) / "fd").exists():
        return Process(start_time(pid, proc), None)  # a /proc without descriptors: cannot tell
    return Process(start_time(pid, proc), None if held is None else bool(held))


def scan(proc: Path = Path("/proc"), prefix: str = DEVICE_PREFIX) -> tuple[list[Holder], int]:
    """Every process holding a GPU device file, by PID; and how many processes' descriptors could
    not be read (those may hold one too)."""
    holders = []
    unreadable = 0
    for entry in sorted(proc.iterdir(), key=lambda p: (len(p.name), p.name)) if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        held = devices(pid, proc, prefix)
        if held is None:
            unreadable += 1
        elif held:
            holders.append(Holder(pid, start_time(pid, proc), held))
    return holders, unreadable
