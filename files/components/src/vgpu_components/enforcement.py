"""cgpu-monitor's enforcement of the quota from ground truth (the rule is ground_truth.py's).

Every monitor.check_interval_s:
1. NVML's per-process memory on each GPU (host PIDs);
2. each process's container, from its cgroup or PID namespace (cgroups.py), and that container's
   pod from the pods on this node as the API server lists them (the container whose status
   carries the cgroup's container ID, else the pod's only container with a quota); its quota from
   `quotas`: cgpu-monitor's view of kubelet's PodResources and the quota files the device plugin
   or the DRA driver wrote (monitor.MonitorCollector.quotas), the one source of a container's
   quota on both scheduling paths. A container with no quota file has quota 0;
3. ground_truth.Tracker; the violations due go to enforcement_actions.Actions, which posts the
   Events and, with monitor.enforcement evict, deletes the pod with a capped grace period and, if it
   is still over that long after, at once; a process in no pod gets a Warning Event on the node.

Nothing is judged while the quotas cannot be read (kubelet away: the check fails and is retried),
and a container whose quota file cannot be read is left out of that check: an unknown quota is
never taken for none. Needs: the host's PID namespace (hostPID), and from the API server
`list` of pods, `create` of events and, with evict, `delete` of pods on its own node.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_components import cgroups, ground_truth, kube, nvml
from vgpu_components.enforcement_actions import Actions
from vgpu_components.ground_truth import Container, HostProcess, Owner, SystemProcess, Usage, Violation, Who

log = logging.getLogger("vgpu.monitor")
MIB = 1024 * 1024
MODES = ("evict", "report")
# (namespace, pod, container) -> quota in bytes of each container kubelet lists with our GPU memory
# (None: its quota file cannot be read). Raises when kubelet cannot be asked.
Quotas = Callable[[], Mapping[tuple[str, str, str], int | None]]


@dataclass(frozen=True)
class SystemComponent:
    """Processes that hold GPU memory by design: those of `container` in the pods of the stack's
    namespace labelled app.kubernetes.io/name=`component`, running one of `executables`."""

    component: str
    container: str
    executables: tuple[str, ...]
    why: str


# The known system processes. The components' own NVML readers (cgpu-monitor, the device plugin,
# the DRA driver, nvidia-smi) are not here: NVML makes no CUDA context, so they hold no GPU memory
# and NVML lists no process of theirs.
SYSTEM_PROCESSES = (
    SystemComponent(
        "nvidia-mps",
        "nvidia-mps",
        ("nvidia-cuda-mps-server", "nvidia-cuda-mps-control"),
        "an MPS server holds the shared CUDA context its clients' kernels run in (its control daemon "
        "none); each client's own memory is listed under the client's PID and counts against its container",
    ),
)


@dataclass
class Snapshot:
    """What the last check saw, for the metrics."""

    usages: list[Usage] = field(default_factory=list)
    system: dict[str, int] = field(default_factory=dict)
    limits: dict[Who, int] = field(default_factory=dict)
    over_seconds: dict[Who, float] = field(default_factory=dict)


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
    ) -> None:
        section = cfg["monitor"]
        self.node = node
        self.backend = backend
        self.pods = pods
        self.proc = proc
        self.quotas = quotas
        self.namespace = namespace  # the stack's, where the system components run
        self.mode = section["enforcement"]
        self.interval_s = float(section["check_interval_s"])
        self.tracker = ground_truth.Tracker(
            float(section["grace_seconds"]), int(section["context_allowance_mib"]) * MIB
        )
        self.latest = Snapshot()
        self.acting = Actions(self.mode, int(section["termination_grace_seconds"]), node, pods)
        self.check_errors = 0
        self._pods_by_uid: dict[str, dict[str, Any]] = {}

    # --- one check ------------------------------------------------------------------------------
    def check(self, now: float | None = None) -> list[Violation]:
        now = time.monotonic() if now is None else now
        seen = [
            (gpu.uuid, p.pid, p.used_bytes) for gpu in self.backend.gpus() for p in self.backend.processes(gpu.uuid)
        ]
        owner = self._owners({pid for _gpu, pid, _used in seen}) if seen else lambda _pid: None
        current, system = ground_truth.usages(seen, owner)
        due = self.tracker.observe(current, now)
        self.latest = Snapshot(
            current,
            system,
            {u.who: self.tracker.limit(u) for u in current},
            {u.who: self.tracker.over_seconds(u.who) for u in current},
        )
        self.acting.act(due, self._pods_by_uid, now)
        return due

    @property
    def actions(self) -> dict[str, int]:
        """Violations acted on, by what was done (vgpu_quota_violations_total)."""
        return self.acting.counts

    def _owners(self, pids: set[int]) -> ground_truth.OwnerOf:
        """Whose each of these processes is, from one read of the pods and one of the quotas."""
        refs = {pid: cgroups.container_of(pid, self.proc) for pid in pids}
        if not all(refs.values()):  # one left its container's cgroup, or is the host's
            by_namespace = cgroups.containers_by_pid_namespace(self.proc)
            for pid in [p for p, ref in refs.items() if ref is None]:
                namespace = cgroups.pid_namespace(pid, self.proc)
                refs[pid] = by_namespace.get(namespace) if namespace else None
        quotas: Mapping[tuple[str, str, str], int | None] = {}
        if any(refs.values()):
            if self.pods is not None:
                self._pods_by_uid = {p["metadata"]["uid"]: p for p in self.pods.pods_on_node(self.node)}
            if self.quotas is None:
                raise RuntimeError("no source of the containers' quotas (kubelet's PodResources)")
            quotas = self.quotas()

        def owner(pid: int) -> Owner | SystemProcess | None:
            ref = refs.get(pid)
            if ref is None:
                return Owner(HostProcess(pid, self._command(pid)), 0)
            if self.pods is None:
                return None  # no API server: its pod and quota cannot be known
            pod = self._pods_by_uid.get(ref.pod_uid)
            if pod is None:  # a static pod, or one deleted since: nothing to evict
                where = f"in pod UID {ref.pod_uid}, which the API server does not list on this node,"
                return Owner(HostProcess(pid, self._command(pid), where), 0)
            name = _container_name(pod, ref.container_id, quotas)
            meta = pod["metadata"]
            system = self._system(pod, name, pid)
            if system is not None:
                return system
            quota = quotas.get((meta["namespace"], meta["name"], name), 0)
            if quota is None:
                return None  # its quota file cannot be read: not judged
            return Owner(Container(meta["namespace"], meta["name"], name, meta["uid"]), quota)

        return owner

    def _system(self, pod: Mapping[str, Any], container: str, pid: int) -> SystemProcess | None:
        """The known system process this is, if any: by the pod it is in and its executable."""
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        for known in SYSTEM_PROCESSES:
            if (
                meta["namespace"] == self.namespace
                and labels.get("app.kubernetes.io/name") == known.component
                and container == known.container
                and self._executable(pid) in known.executables
            ):
                return SystemProcess(known.component, known.why)
        return None

    def _argv(self, pid: int) -> list[str]:
        try:
            raw = (self.proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return []
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]

    def _executable(self, pid: int) -> str:
        argv = self._argv(pid)
        return argv[0].rsplit("/", 1)[-1] if argv else ""

    def _command(self, pid: int) -> str:
        """The process's command line as a shell would show it (at most 200 characters)."""
        argv = self._argv(pid)
        if not argv:
            try:
                return (self.proc / str(pid) / "comm").read_text().strip() or "?"
            except OSError:
                return "?"
        text = shlex.join(argv)
        return text if len(text) <= 200 else text[:197] + "..."

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as exc:
                self.check_errors += 1
                if self.check_errors in (1, 10) or self.check_errors % 100 == 0:
                    log.warning("ground-truth check failed (%d times): %s", self.check_errors, exc)


def _container_name(
    pod: Mapping[str, Any], container_id: str, quotas: Mapping[tuple[str, str, str], int | None]
) -> str:
    """The name of the pod's container with this runtime ID: its status's; before the status
    carries the ID, the pod's only container with a quota; else the ID itself (a container of
    no quota, until its status names it)."""
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod["metadata"]
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
        *(status.get("ephemeralContainerStatuses") or []),
    ]
    for entry in statuses:
        if str(entry.get("containerID", "")).endswith(f"://{container_id}"):
            return str(entry.get("name"))
    names = [
        str(c.get("name"))
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        if quotas.get((meta["namespace"], meta["name"], str(c.get("name"))))
    ]
    return names[0] if len(names) == 1 else container_id[:12]
