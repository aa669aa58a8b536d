"""Whose a host process is, for cgpu-monitor's enforcement (enforcement.py): its container, from
its cgroup or PID namespace (cgroups.py), and that container's pod from the pods on this node as the
API server lists them (the container whose status carries the cgroup's container ID, else the
pod's only container with a quota); its quota from kubelet's PodResources and the quota files the
device plugin or the DRA driver wrote (one source of a container's quota on both scheduling paths;
a container with no quota file has quota 0). Also which processes are the stack's own: the known
system processes that hold GPU memory by design, and the NVML readers that hold the GPU's device
files and no memory.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_components import cgroups
from vgpu_components.cgroups import ContainerRef
from vgpu_components.ground_truth import Container, HostProcess, Owner, SystemProcess, Who

# (namespace, pod, container) -> quota in bytes (None: its quota file cannot be read).
ContainerKey = tuple[str, str, str]
QuotaMap = Mapping[ContainerKey, int | None]


class Quotas(dict[ContainerKey, int | None]):
    """A QuotaMap that also says which allocations (alloc-ids) each container's quota is made of,
    and each allocation's own quota: containers that share an allocation (one DRA claim named by
    several containers) are held to its one quota together (ground_truth.pool)."""

    def __init__(
        self,
        quotas: Mapping[ContainerKey, int | None] | None = None,
        allocations: Mapping[ContainerKey, frozenset[str]] | None = None,
        allocation_quotas: Mapping[str, int | None] | None = None,
    ) -> None:
        super().__init__(quotas or {})
        self.allocations: dict[ContainerKey, frozenset[str]] = dict(allocations or {})
        self.allocation_quotas: dict[str, int | None] = dict(allocation_quotas or {})


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
# The stack's components (app.kubernetes.io/name in its namespace) whose processes hold the GPU's
# device files to read NVML, never memory: not candidates for memory no process is listed for.
NVML_READERS = ("cgpu-monitor", "nvidia-shared-device-plugin", "vgpu-dra-driver", "nvidia-mps")


def refs_of(pids: set[int], proc: Path) -> dict[int, ContainerRef | None]:
    """The container of each process, by its cgroup, else by its PID namespace."""
    refs = {pid: cgroups.container_of(pid, proc) for pid in pids}
    if not all(refs.values()):  # one left its container's cgroup, or is the host's
        by_namespace = cgroups.containers_by_pid_namespace(proc)
        for pid in [p for p, ref in refs.items() if ref is None]:
            namespace = cgroups.pid_namespace(pid, proc)
            refs[pid] = by_namespace.get(namespace) if namespace else None
    return refs


class Owners:
    """Whose each of some processes is, from one read of the pods on this node (None: no API
    server) and one of the quotas."""

    def __init__(
        self,
        refs: Mapping[int, ContainerRef | None],
        pods_by_uid: Mapping[str, Mapping[str, Any]] | None,
        quotas: QuotaMap,
        proc: Path,
        namespace: str,
    ) -> None:
        self.refs = refs
        self.pods_by_uid = pods_by_uid
        self.quotas = quotas
        self.proc = proc
        self.namespace = namespace  # the stack's, where the system components run

    def container(self, pid: int) -> Container | None:
        """The container of a process in a pod the API server lists on this node, whatever its quota."""
        ref = self.refs.get(pid)
        pod = None if ref is None or self.pods_by_uid is None else self.pods_by_uid.get(ref.pod_uid)
        if ref is None or pod is None:
            return None
        meta = pod["metadata"]
        name = container_name(pod, ref.container_id, self.quotas)
        return Container(meta["namespace"], meta["name"], name, meta["uid"])

    def owner(self, pid: int) -> Owner | SystemProcess | None:
        """Whose it is and its quota; None when that cannot be known this check (not judged)."""
        ref = self.refs.get(pid)
        if ref is None:
            return Owner(HostProcess(pid, self.command(pid)), 0)
        if self.pods_by_uid is None:
            return None  # no API server: its pod and quota cannot be known
        container = self.container(pid)
        if container is None:  # a static pod, or one deleted since: nothing to evict
            where = f"in pod UID {ref.pod_uid}, which the API server does not list on this node,"
            return Owner(HostProcess(pid, self.command(pid), where), 0)
        system = self.system(container, pid)
        if system is not None:
            return system
        quota = self.quotas.get((container.namespace, container.pod, container.container), 0)
        return None if quota is None else Owner(container, quota)  # None: its quota file cannot be read

    def _labelled(self, container: Container) -> str:
        """The stack component the container's pod is (app.kubernetes.io/name in the stack's
        namespace), or ""."""
        pod = (self.pods_by_uid or {}).get(container.pod_uid) or {}
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != self.namespace:
            return ""
        return str((meta.get("labels") or {}).get("app.kubernetes.io/name", ""))

    def allocations(self, who: Who) -> frozenset[str] | None:
        """The allocations (alloc-ids) a container's quota is made of, where the quotas say."""
        if not isinstance(who, Container) or not isinstance(self.quotas, Quotas):
            return None
        return self.quotas.allocations.get((who.namespace, who.pod, who.container))

    @property
    def allocation_quotas(self) -> Mapping[str, int | None]:
        return self.quotas.allocation_quotas if isinstance(self.quotas, Quotas) else {}

    def system(self, container: Container, pid: int) -> SystemProcess | None:
        """The known system process this is, if any: by the pod it is in and its executable."""
        component = self._labelled(container)
        for known in SYSTEM_PROCESSES:
            if (
                component == known.component
                and container.container == known.container
                and self.executable(pid) in known.executables
            ):
                return SystemProcess(known.component, known.why)
        return None

    def reader(self, container: Container) -> bool:
        """A container of the stack's own that reads NVML (holds the GPU's files, no memory)."""
        return self._labelled(container) in NVML_READERS

    def argv(self, pid: int) -> list[str]:
        try:
            raw = (self.proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return []
        return [part.decode(errors="replace") for part in raw.split(b"\0") if part]

    def executable(self, pid: int) -> str:
        argv = self.argv(pid)
        return argv[0].rsplit("/", 1)[-1] if argv else ""

    def command(self, pid: int) -> str:
        """The process's command line as a shell would show it (at most 200 characters)."""
        argv = self.argv(pid)
        if not argv:
            try:
                return (self.proc / str(pid) / "comm").read_text().strip() or "?"
            except OSError:
                return "?"
        text = shlex.join(argv)
        return text if len(text) <= 200 else text[:197] + "..."


def container_name(pod: Mapping[str, Any], container_id: str, quotas: QuotaMap) -> str:
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
