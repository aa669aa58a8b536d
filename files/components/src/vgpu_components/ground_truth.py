"""Ground truth: every byte of GPU memory the driver reports, each process tied to a quota.

libvgpu counts inside the container, in a region the container can write; NVML on the host
reports what each process really holds, and nothing in a container can change that. The rule:

  Every process holding GPU memory is one of:
  - a process of a container with a quota (its quota file, written by the device plugin or the
    DRA driver). The container is over its quota when the memory its processes hold on the GPUs
    exceeds quota + context allowance (monitor.context_allowance_mib), once per container however
    many processes it runs: libvgpu keeps what the GPU holds for a container's processes within
    its quota plus one context (files/libvgpu/docs/design.md, "The invariant"), and the allowance
    is the margin for what it cannot see between two of its checks. Per process, 60 processes
    with contexts made small (270 MiB on an H200) held 16 times their quota within the limit;
  - a process of a container without a quota (a pod that asks for no GPU memory, a sidecar of a
    GPU pod): its quota is 0 and no allowance applies, so any memory at all is over;
  - a host process outside Kubernetes (or in a pod the API server does not list on this node):
    quota 0 as well, reported with its PID and command, never evicted (it is in no pod);
  - a known system process (owners.SYSTEM_PROCESSES, each with why): not judged.
  Containers that share an allocation (one DRA claim several pods or containers name, which the
  DRA driver refuses to prepare but kubelet may hand a later pod unasked) are held to its one quota
  together (pool): one allocation is one quota, however many consume it.
  Memory NVML lists under a PID whose process exited or that names another process now, and memory
  the GPU reports used that no process is listed for, is charged to the container that holds it by
  attribution.py's rules (Usage.traced_bytes), or reported as nobody's; it is never its PID's new
  process's.
  Time over is a budget, not a timer: each container's time over its limit accumulates, and time
  under (or with no process on a GPU) pays it back at DECAY seconds per second, ten times slower.
  Over with more than the grace period (monitor.grace_seconds) accumulated is a violation, at every
  observation while it stays over (what is done again is enforcement_actions.py's). A timer that one
  check under the limit reset let a container over its quota 80 % of the time, or one that
  restarted its processes before the grace, run for ever; with the budget, one over more than 1/11
  of the time is caught, and an honest one (never over: libvgpu refuses at the call) owes nothing.

The core is pure, observations in and violations out, so it runs the same in cgpu-monitor
(enforcement.py maps processes to pods through their cgroups and the API server) and on a GPU
host without kubelet over a given pid -> container mapping:

    python3 -m vgpu_components.ground_truth --pid 4242=ns/pod/main:1000 --grace 10 --until-violation
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from vgpu_components import nvml
from vgpu_components.memory_size import MIB

# Seconds of the over-quota budget paid back per second under the limit.
DECAY = 0.1


@dataclass(frozen=True)
class Container:
    namespace: str
    pod: str
    container: str
    pod_uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


@dataclass(frozen=True)
class HostProcess:
    """A process holding GPU memory that no pod on this node owns; it cannot be evicted."""

    pid: int
    command: str
    where: str = "outside Kubernetes"

    def __str__(self) -> str:
        return f"host process {self.pid} ({self.command})"


Who = Container | HostProcess


@dataclass(frozen=True)
class Owner:
    """Whose a process is, and the quota in bytes it is held to (0: none)."""

    who: Who
    quota_bytes: int


@dataclass(frozen=True)
class SystemProcess:
    """A process that holds GPU memory by design (owners.SYSTEM_PROCESSES), not judged."""

    name: str
    why: str


@dataclass
class Usage:
    """One container's (or host process's) real use of GPU memory at one moment."""

    who: Who
    quota_bytes: int
    used_bytes: int = 0
    processes: int = 0
    gpus: set[str] = field(default_factory=set)
    traced_bytes: int = 0  # of used_bytes: listed under processes that exited, held by its own (attribution.py)
    pooled_bytes: int = 0  # what the other consumers of its allocation(s) hold, judged with its own (pool)
    pooled_with: tuple[str, ...] = ()  # those other consumers

    @property
    def judged_bytes(self) -> int:
        """What is held against its quota: its own memory and its allocation's other consumers'."""
        return self.used_bytes + self.pooled_bytes


@dataclass(frozen=True)
class Violation:
    who: Who
    used_bytes: int
    limit_bytes: int
    quota_bytes: int
    processes: int
    over_seconds: float
    gpus: tuple[str, ...]
    traced_bytes: int = 0
    pooled_bytes: int = 0
    pooled_with: tuple[str, ...] = ()

    def describe(self) -> str:
        held = f"holds {self.used_bytes // MIB} MiB of GPU memory"
        if self.pooled_with:
            named = ", ".join(self.pooled_with[:5]) + (
                f" and {len(self.pooled_with) - 5} more" if len(self.pooled_with) > 5 else ""
            )
            held += (
                f", and with the {len(self.pooled_with)} other consumer(s) of its allocation "
                f"({named}) {(self.used_bytes + self.pooled_bytes) // MIB} MiB together"
            )
        if self.traced_bytes:
            held += (
                f" ({self.traced_bytes // MIB} MiB of it listed under processes that exited or no process, "
                "held through the GPU's device files by its processes)"
            )
        gpus = ", ".join(self.gpus)
        if isinstance(self.who, HostProcess):
            return (
                f"process {self.who.pid} ({self.who.command}) {self.who.where} {held} on {gpus} with no quota "
                f"for {self.over_seconds:.0f} s (accumulated); it is in no pod on this node, so it cannot be evicted: "
                "stop it on the node"
            )
        where = f"({self.processes} process(es) on {gpus})"
        if self.quota_bytes <= 0:
            return (
                f"container {self.who.container} {held} {where} with no GPU-memory quota (it was allocated "
                f"no GPU memory) for {self.over_seconds:.0f} s (accumulated)"
            )
        return (
            f"container {self.who.container} {held} {where} over its quota of "
            f"{self.quota_bytes // MIB} MiB plus the context allowance ({self.limit_bytes // MIB} MiB in all) "
            f"for {self.over_seconds:.0f} s (accumulated)"
        )


# Whose a process is: an Owner, a known system process, or None when its quota cannot be known
# this check (it is then not judged).
OwnerOf = Callable[[int], "Owner | SystemProcess | None"]


def usages(
    processes: Iterable[tuple[str, int, int]], owner: OwnerOf, charged: Iterable[tuple[str, Owner, int]] = ()
) -> tuple[list[Usage], dict[str, int]]:
    """Sum (GPU UUID, pid, bytes) per container (or host process), and the memory `charged` to an
    owner that no live process of it is listed for (attribution.py); also the bytes per GPU that
    the known system processes hold."""
    by_who: dict[Who, Usage] = {}
    for gpu, charged_to, used in charged:
        usage = by_who.setdefault(charged_to.who, Usage(charged_to.who, charged_to.quota_bytes))
        usage.used_bytes += used
        usage.traced_bytes += used
        usage.gpus.add(gpu)
    system: dict[str, int] = {}
    for gpu, pid, used in processes:
        whose = owner(pid)
        if whose is None:
            continue
        if isinstance(whose, SystemProcess):
            system[gpu] = system.get(gpu, 0) + used
            continue
        usage = by_who.setdefault(whose.who, Usage(whose.who, whose.quota_bytes))
        usage.used_bytes += used
        usage.processes += 1
        usage.gpus.add(gpu)
    return list(by_who.values()), system


def pool(
    current: Iterable[Usage],
    allocations_of: Callable[[Who], frozenset[str] | None],
    allocation_quotas: Mapping[str, int | None],
) -> list[Usage]:
    """Containers that share an allocation (one DRA claim named by several pods or containers)
    are held to its one quota together (issue 40): each such container is judged by what all of
    them hold against the quota of all the allocations they are linked through (each counted
    once), and each is due when the pool is over. Containers of an allocation of their own are
    returned as they are."""
    current = list(current)
    parent: dict[str, str] = {}

    def root(alloc_id: str) -> str:
        while parent.setdefault(alloc_id, alloc_id) != alloc_id:
            alloc_id = parent[alloc_id]
        return alloc_id

    shares = {u.who: sorted(allocations_of(u.who) or ()) for u in current}
    for alloc_ids in shares.values():
        for alloc_id in alloc_ids[1:]:
            parent[root(alloc_id)] = root(alloc_ids[0])
    members: dict[str, list[Usage]] = {}
    for usage in current:
        if shares[usage.who]:
            members.setdefault(root(shares[usage.who][0]), []).append(usage)
    out = []
    for usage in current:
        group = members.get(root(shares[usage.who][0]), []) if shares[usage.who] else []
        if len(group) < 2:
            out.append(usage)
            continue
        linked = {a for other in group for a in shares[other.who]}
        quotas = [allocation_quotas.get(a) for a in linked]
        quota = usage.quota_bytes if any(q is None for q in quotas) else sum(q or 0 for q in quotas)
        others = [other for other in group if other.who != usage.who]
        out.append(
            replace(
                usage,
                quota_bytes=quota,
                pooled_bytes=sum(other.used_bytes for other in others),
                pooled_with=tuple(sorted(str(other.who) for other in others)),
            )
        )
    return out


class Tracker:
    """Follows containers over time and reports each one over its limit once its time over,
    accumulated and slowly paid back (the rule above), reaches the grace period."""

    def __init__(self, grace_s: float, allowance_bytes: int) -> None:
        self.grace_s = grace_s
        self.allowance_bytes = allowance_bytes
        self.spent: dict[Who, float] = {}  # seconds over, accumulated and paid back
        self._over: set[Who] = set()  # over at the last observation
        self._last: float | None = None

    def limit(self, usage: Usage) -> int:
        """Quota plus one allowance for the container; 0 for what has no quota (no context is
        honest there)."""
        if usage.quota_bytes <= 0:
            return 0
        return usage.quota_bytes + self.allowance_bytes

    def observe(self, current: Iterable[Usage], now: float | None = None) -> list[Violation]:
        """The violations due at this observation: every container over its limit with the grace
        period spent. The time since the last observation counts as over in full when the
        container was over at both, half when at one of them."""
        now = time.monotonic() if now is None else now
        elapsed = 0.0 if self._last is None else max(0.0, now - self._last)
        self._last = now
        current = list(current)
        over = {u.who for u in current if u.judged_bytes > self.limit(u)}
        for key in set(self.spent) | over:
            over_s = elapsed * ((key in self._over) + (key in over)) / 2
            spent = self.spent.get(key, 0.0) + over_s - DECAY * (elapsed - over_s)
            if spent > 0 or key in over:
                self.spent[key] = max(spent, 0.0)
            else:  # paid back in full
                del self.spent[key]
        self._over = over
        due = []
        for usage in current:
            key = usage.who
            if key in over and self.spent[key] >= self.grace_s:
                due.append(
                    Violation(
                        key,
                        usage.used_bytes,
                        self.limit(usage),
                        usage.quota_bytes,
                        usage.processes,
                        self.spent[key],
                        tuple(sorted(usage.gpus)),
                        usage.traced_bytes,
                        usage.pooled_bytes,
                        usage.pooled_with,
                    )
                )
        return due

    def over_seconds(self, who: Who) -> float:
        """Its time over, accumulated and paid back (0: owes nothing)."""
        return self.spent.get(who, 0.0)


# --- the command line: a given pid -> container mapping, on a host without kubelet -----------
def _parent(pid: int, proc: Path) -> int:
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command name


def owner_from_pids(mapping: dict[int, Owner], proc: Path = Path("/proc")) -> OwnerOf:
    """Processes given by pid, and their descendants, belong to the given containers."""

    def owner(pid: int) -> Owner | None:
        for _depth in range(64):
            if pid in mapping:
                return mapping[pid]
            pid = _parent(pid, proc)
            if pid <= 1:
                return None
        return None

    return owner


def _pid_argument(text: str) -> tuple[int, Owner]:
    """PID=NAMESPACE/POD/CONTAINER:QUOTA_MIB (or PID=NAME:QUOTA_MIB)."""
    try:
        pid, rest = text.split("=", 1)
        name, quota = rest.rsplit(":", 1)
        parts = name.split("/")
        container = Container(*parts) if len(parts) == 3 else Container("", "", name)
        return int(pid), Owner(container, int(quota) * MIB)
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"expected PID=NAMESPACE/POD/CONTAINER:QUOTA_MIB, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m vgpu_components.ground_truth",
        description="Compare the real GPU memory (NVML, per process) of given processes with their quotas; "
        "prints one JSON line per container and check, and one per violation.",
    )
    parser.add_argument(
        "--pid", type=_pid_argument, action="append", required=True, help="PID=NS/POD/CONTAINER:QUOTA_MIB"
    )
    parser.add_argument("--grace", type=float, default=30.0, help="seconds over the limit before a violation")
    parser.add_argument("--allowance-mib", type=int, default=512, help="context allowance per container (MiB)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between checks")
    parser.add_argument("--duration", type=float, default=120.0, help="stop after this many seconds")
    parser.add_argument("--until-violation", action="store_true", help="exit 0 at the first violation, 1 if none")
    args = parser.parse_args(argv)
    backend = nvml.NvmlBackend()
    owner = owner_from_pids(dict(args.pid))
    tracker = Tracker(args.grace, args.allowance_mib * MIB)
    started = time.monotonic()
    try:
        while time.monotonic() - started < args.duration:
            now = time.monotonic()
            seen = [(gpu.uuid, p.pid, p.used_bytes) for gpu in backend.gpus() for p in backend.processes(gpu.uuid)]
            current, _system = usages(seen, owner)
            for usage in current:
                line = {
                    "t": round(now - started, 2),
                    "container": str(usage.who),
                    "used_mib": usage.used_bytes // MIB,
                    "limit_mib": tracker.limit(usage) // MIB,
                    "processes": usage.processes,
                    "over_s": round(tracker.over_seconds(usage.who), 2),
                }
                print(json.dumps(line), flush=True)
            for violation in tracker.observe(current, now):
                print(json.dumps({"t": round(now - started, 2), "violation": violation.describe()}), flush=True)
                if args.until_violation:
                    return 0
            time.sleep(args.interval)
    finally:
        backend.close()
    return 1 if args.until_violation else 0


if __name__ == "__main__":
    sys.exit(main())
