"""Every byte on a GPU has an owner: NVML's per-process entries checked against the processes that
hold them, and memory no live process answers for traced to the processes that hold the GPU. Pure:
entries and what /proc says in, charges and what stays unattributed out (enforcement.py reads
NVML and /proc through device_holders.py).

The rules:
1. An entry (GPU, PID, bytes) is its process's when a process of that PID exists, holds one of the
   GPU's device files (where its descriptors can be read), and has the start time the entry was
   first seen with (a PID and its start time name one process). Otherwise the entry is orphaned:
   its process exited, or the PID names another process now, which is never blamed for it.
   Memory outlives its process when a child the process forked keeps the driver's descriptors.
2. An orphaned entry whose process the monitor saw alive is still that process's container's: its
   children, which hold the memory, are in its container.
3. Otherwise it, and the memory the device reports used beyond all entries when that gap passes
   the tolerance (monitor.unattributed_tolerance_mib), is charged to the one container whose
   processes hold the GPU's device files with no live entry of their own, those holding
   /dev/nvidia-uvm (CUDA's state) first. The stack's own NVML readers and processes in no pod are
   not candidates. No such container, or several: the memory stays unattributed, exported and
   reported on the node with the candidates named, never guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vgpu_components.device_holders import Process
from vgpu_components.ground_truth import MIB, Container, Owner, SystemProcess

UVM = "nvidia-uvm"
EXITED = -1  # the start time of an entry first seen without its process: any process of its PID is another


@dataclass(frozen=True)
class Entry:
    """One NVML per-process entry."""

    gpu: str
    pid: int
    used_bytes: int


@dataclass(frozen=True)
class Orphan:
    """An entry no live process answers for, and why; `owner`: whose it was when its process was
    seen alive (rule 2)."""

    entry: Entry
    why: str
    owner: Owner | None = None


@dataclass(frozen=True)
class Candidate:
    """A process of a container that holds the GPU's device files with no live entry of its own;
    `owner`: its container with its quota (None: its quota cannot be known this check, so it is
    charged nothing)."""

    who: Container
    owner: Owner | None
    devices: frozenset[str]
    pid: int = 0


@dataclass
class Unattributed:
    """Memory on one GPU that no container could be charged with, and why."""

    gpu: str
    bytes: int = 0
    reasons: list[str] = field(default_factory=list)


Charge = tuple[str, Owner, int]  # (GPU, the owner charged, bytes)


class Ledger:
    """The process each entry was first seen with (rule 1), and its owner while it was alive."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, int], tuple[int | None, Owner | None]] = {}

    def split(self, entries: Iterable[Entry], processes: Mapping[int, Process]) -> tuple[list[Entry], list[Orphan]]:
        """The entries their process answers for, and the orphaned ones (rule 1)."""
        live, orphans = [], []
        seen = set()
        for entry in entries:
            key = (entry.gpu, entry.pid)
            seen.add(key)
            now = processes.get(entry.pid, Process(None, False))
            exited = now.start is None and now.holds_gpu is False
            if key not in self._first:  # first seen: with its process, or already without one
                self._first[key] = (EXITED if exited else now.start, None)
            first_start, owner = self._first[key]
            if exited:
                orphans.append(Orphan(entry, f"PID {entry.pid}, which has exited", owner))
            elif first_start is not None and now.start is not None and now.start != first_start:
                orphans.append(Orphan(entry, f"PID {entry.pid}, which names another process now", owner))
            elif now.holds_gpu is False:
                orphans.append(Orphan(entry, f"PID {entry.pid}, whose process holds no GPU device file", owner))
            else:
                live.append(entry)
        for key in set(self._first) - seen:  # NVML no longer lists it
            del self._first[key]
        return live, orphans

    def remember(self, entry: Entry, owner: Owner | SystemProcess | None) -> None:
        """The owner of a live entry's process, for when it is gone (rule 2)."""
        key = (entry.gpu, entry.pid)
        if isinstance(owner, Owner) and isinstance(owner.who, Container) and key in self._first:
            self._first[key] = (self._first[key][0], owner)


def holder(candidates: Iterable[Candidate]) -> tuple[Owner | None, list[str]]:
    """The one container among the candidates (those holding /dev/nvidia-uvm first), and the
    containers considered (rule 3)."""
    candidates = list(candidates)
    cuda = [c for c in candidates if UVM in c.devices] or candidates
    owners = {c.who: c.owner for c in cuda}
    pids: dict[Container, list[int]] = {}
    for c in cuda:
        pids.setdefault(c.who, []).append(c.pid)
    # Each container with the PIDs that made it one: what an operator looks at on the node.
    named = sorted(f"{who} (PID {', '.join(str(p) for p in sorted(pids[who]))})" for who in owners)
    return (next(iter(owners.values())) if len(owners) == 1 else None), named


def charges(
    orphans: Iterable[Orphan], gaps: Mapping[str, int], tolerance_bytes: int, candidates: Iterable[Candidate]
) -> tuple[list[Charge], dict[str, Unattributed]]:
    """Who is charged with the orphaned entries and each GPU's gap (rules 2 and 3), and what stays
    unattributed per GPU (a gap within the tolerance is neither)."""
    found, named = holder(candidates)
    charged: list[Charge] = []
    left: dict[str, Unattributed] = {}
    for orphan in orphans:
        owner = orphan.owner or found
        if owner is not None:
            charged.append((orphan.entry.gpu, owner, orphan.entry.used_bytes))
            continue
        gap = left.setdefault(orphan.entry.gpu, Unattributed(orphan.entry.gpu))
        gap.bytes += orphan.entry.used_bytes
        gap.reasons.append(f"{orphan.entry.used_bytes // MIB} MiB under {orphan.why}")
    for gpu, unlisted in gaps.items():
        if unlisted <= tolerance_bytes:
            continue
        if found is not None:
            charged.append((gpu, found, unlisted))
            continue
        gap = left.setdefault(gpu, Unattributed(gpu))
        gap.bytes += unlisted
        gap.reasons.append(f"{unlisted // MIB} MiB the GPU reports used that no process is listed for")
    for gap in left.values():
        holders = ", ".join(named) if named else "none"
        gap.reasons.append(f"containers holding the GPU with no entry of their own: {holders}")
    return charged, left
