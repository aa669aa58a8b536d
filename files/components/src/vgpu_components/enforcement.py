"""cgpu-monitor's enforcement of the quota from ground truth (the rule is ground_truth.py's; every
byte has an owner by attribution.py's).

Every monitor.check_interval_s:
1. NVML's per-process memory on each GPU (host PIDs) and each GPU's used memory;
2. each entry checked against its process (device_holders.py: does a process of that PID exist,
   with the start time it was first seen with, holding the GPU's device files?); an entry no live
   process answers for (its process exited, its PID reused) is orphaned;
3. each live process's owner (owners.py: its container through its cgroup or PID namespace and the
   pods the API server lists on this node, its quota from `quotas`: cgpu-monitor's view of kubelet's
   PodResources and the quota files; a container with no quota file has quota 0);
4. orphaned memory, and what the GPU reports used beyond every entry (above
   monitor.unattributed_tolerance_mib), charged to the container whose processes hold the GPU's
   device files with no entry of their own (device_holders.scan, only when there is such memory);
   what no container can be charged with is exported and reported on the node (Event
   GPUMemoryUnattributed, once while it lasts);
5. the containers of one shared allocation pooled against its one quota (ground_truth.pool, from
   the allocations `quotas` names when it returns an owners.Quotas); ground_truth.Tracker; the
   violations due go to enforcement_actions.Actions, which posts the Events and, with
   monitor.enforcement evict, deletes the pod with a capped grace period and, if it is still over
   that long after, at once; a process in no pod gets a Warning Event on the node.

Nothing is judged while the quotas cannot be read (kubelet away: the check fails and is retried),
and a container whose quota file cannot be read is left out of that check: an unknown quota is
never taken for none. Needs: the host's PID namespace (hostPID), CAP_SYS_PTRACE to read other
processes' /proc/<pid>/fd (never to trace them), and from the API server `list` of pods, `create`
of events and, with evict, `delete` of pods on its own node.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_components import attribution, device_holders, ground_truth, kube, nvml, owners
from vgpu_components.attribution import Candidate, Entry, Orphan, Unattributed
from vgpu_components.enforcement_actions import Actions
from vgpu_components.ground_truth import Owner, Usage, Violation, Who
from vgpu_components.memory_size import MIB
from vgpu_components.owners import NVML_READERS, SYSTEM_PROCESSES, Owners

__all__ = ["NVML_READERS", "SYSTEM_PROCESSES", "Enforcer", "Snapshot"]
log = logging.getLogger("vgpu.monitor")
MODES = ("evict", "report")
# (namespace, pod, container) -> quota in bytes of each container kubelet lists with our GPU memory
# (None: its quota file cannot be read). Raises when kubelet cannot be asked.
Quotas = Callable[[], Mapping[tuple[str, str, str], int | None]]


@dataclass
class Snapshot:
    """What the last check saw, for the metrics."""

    usages: list[Usage] = field(default_factory=list)
    system: dict[str, int] = field(default_factory=dict)
    limits: dict[Who, int] = field(default_factory=dict)
    over_seconds: dict[Who, float] = field(default_factory=dict)
    unattributed: dict[str, Unattributed] = field(default_factory=dict)


class Enforcer:
    def __init__(
        self,
        cfg: Mapping[str, Any],
        node: str,
        backend: nvml.GpuBackend,
        pods: kube.PodApi | None,
        proc: Path = Path("/proc"),
        *,
        quotas: Quotas | None = None,
        namespace: str = "kube-system",
        device_prefix: str = device_holders.DEVICE_PREFIX,
    ) -> None:
        section = cfg["monitor"]
        self.node = node
        self.backend = backend
        self.pods = pods
        self.proc = proc
        self.quotas = quotas
        self.namespace = namespace  # the stack's, where the system components run
        self.device_prefix = device_prefix
        self.mode = section["enforcement"]
        self.interval_s = float(section["check_interval_s"])
        self.tolerance_bytes = int(section["unattributed_tolerance_mib"]) * MIB
        self.tracker = ground_truth.Tracker(
            float(section["grace_seconds"]), int(section["context_allowance_mib"]) * MIB
        )
        self.ledger = attribution.Ledger()
        self.latest = Snapshot()
        self.acting = Actions(self.mode, int(section["termination_grace_seconds"]), node, pods)
        self.check_errors = 0
        self.unreadable_processes = 0  # processes whose descriptors a scan could not read, in all
        self._pods_by_uid: dict[str, dict[str, Any]] = {}
        self._reported_gaps: dict[str, str] = {}  # GPU: what its last report said

    # --- one check ------------------------------------------------------------------------------
    def check(self, now: float | None = None) -> list[Violation]:
        now = time.monotonic() if now is None else now
        gpus = self.backend.gpus()
        entries = [Entry(g.uuid, p.pid, p.used_bytes) for g in gpus for p in self.backend.processes(g.uuid)]
        processes = {
            pid: device_holders.process(pid, self.proc, self.device_prefix) for pid in {e.pid for e in entries}
        }
        live, orphans = self.ledger.split(entries, processes)
        gaps = self._gaps(gpus, entries)
        holders = self._holders(orphans, gaps)
        whose = self._owners({e.pid for e in live} | {h.pid for h in holders})
        for entry in live:
            self.ledger.remember(entry, whose.owner(entry.pid))
        candidates = self._candidates(holders, {e.pid for e in live}, whose)
        charged, unattributed = attribution.charges(orphans, gaps, self.tolerance_bytes, candidates)
        current, system = ground_truth.usages([(e.gpu, e.pid, e.used_bytes) for e in live], whose.owner, charged)
        current = ground_truth.pool(current, whose.allocations, whose.allocation_quotas)
        due = self.tracker.observe(current, now)
        self.latest = Snapshot(
            current,
            system,
            {u.who: self.tracker.limit(u) for u in current},
            {u.who: self.tracker.over_seconds(u.who) for u in current},
            unattributed,
        )
        self._report(unattributed, {g.uuid: g for g in gpus})
        self.acting.act(due, self._pods_by_uid, now)
        return due

    @property
    def actions(self) -> dict[str, int]:
        """Violations acted on, by what was done (vgpu_quota_violations_total)."""
        return self.acting.counts

    def _owners(self, pids: set[int]) -> Owners:
        """Whose each of these processes is, from one read of the pods and one of the quotas."""
        refs = owners.refs_of(pids, self.proc)
        quotas: Mapping[tuple[str, str, str], int | None] = {}
        if any(refs.values()):
            if self.pods is not None:
                self._pods_by_uid = {p["metadata"]["uid"]: p for p in self.pods.pods_on_node(self.node)}
            if self.quotas is None:
                raise RuntimeError("no source of the containers' quotas (kubelet's PodResources)")
            quotas = self.quotas()
        pods = None if self.pods is None else self._pods_by_uid
        return Owners(refs, pods, quotas, self.proc, self.namespace)

    def _gaps(self, gpus: list[nvml.Gpu], entries: list[Entry]) -> dict[str, int]:
        """Per GPU, the memory it reports used (less the driver's reserve) that no entry names."""
        listed: dict[str, int] = {}
        for entry in entries:
            listed[entry.gpu] = listed.get(entry.gpu, 0) + entry.used_bytes
        gaps = {}
        for gpu in gpus:
            try:
                memory = self.backend.memory(gpu.uuid)
            except Exception as exc:  # its processes are still judged; its gap is unknown this check
                log.warning("NVML memory query for %s failed: %s", gpu.uuid, exc)
                continue
            gaps[gpu.uuid] = max(0, (memory.used_mib - memory.reserved_mib) * MIB - listed.get(gpu.uuid, 0))
        return gaps

    def _holders(self, orphans: list[Orphan], gaps: Mapping[str, int]) -> list[device_holders.Holder]:
        """The processes holding the GPU's device files, read only when there is memory to trace."""
        if not any(o.owner is None for o in orphans) and all(gap <= self.tolerance_bytes for gap in gaps.values()):
            return []
        holders, unreadable = device_holders.scan(self.proc, self.device_prefix)
        self.unreadable_processes += unreadable
        return holders

    def _candidates(self, holders: list[device_holders.Holder], live: set[int], whose: Owners) -> list[Candidate]:
        """The containers whose processes hold the GPU with no live entry of their own (the stack's
        NVML readers and processes in no pod are none)."""
        found = []
        for holder in holders:
            container = whose.container(holder.pid)
            if holder.pid in live or container is None or whose.reader(container):
                continue
            owner = whose.owner(holder.pid)
            if owner is None or isinstance(owner, Owner):
                found.append(Candidate(container, owner, holder.devices, holder.pid))
        return found

    def _report(self, unattributed: Mapping[str, Unattributed], gpus: Mapping[str, nvml.Gpu]) -> None:
        """A log line and an Event on the node for each GPU whose unattributed memory passes the
        tolerance, once while it does; a log line again whenever what the monitor found about it
        changes (the candidates, the PIDs), so the log shows what each check saw."""
        reported: dict[str, str] = {}
        for uuid in sorted(gpu for gpu, gap in unattributed.items() if gap.bytes > self.tolerance_bytes):
            gap = unattributed[uuid]
            index = gpus[uuid].index if uuid in gpus else "?"
            found = (
                f"{gap.bytes // MIB} MiB of GPU memory is held by no container the monitor can tie it to "
                f"({'; '.join(gap.reasons)})"
            )
            reported[uuid] = found
            if self._reported_gaps.get(uuid) == found:
                continue
            if uuid in self._reported_gaps:
                log.warning("GPU %s (%s): still unattributed, now %s", index, uuid, found)
                continue
            message = f"GPU {index} ({uuid}): {found}. Find who holds the GPU on the node: fuser -v /dev/nvidia*"
            log.warning("%s", message)
            if self.pods is not None:
                try:
                    self.pods.node_event(self.node, "GPUMemoryUnattributed", message)
                except Exception as exc:
                    log.warning("could not post event GPUMemoryUnattributed on node %s: %s", self.node, exc)
        self._reported_gaps = reported

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as exc:
                self.check_errors += 1
                if self.check_errors in (1, 10) or self.check_errors % 100 == 0:
                    log.warning("ground-truth check failed (%d times): %s", self.check_errors, exc)
