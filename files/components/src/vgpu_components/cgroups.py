"""Which container a host process belongs to, from its cgroup (/proc/<pid>/cgroup) or, when that
names none, from its PID namespace.

The rule: kubelet puts every container in a cgroup whose path names the pod's UID
("pod<uid>", with "_" for "-" under the systemd driver) and then the container's ID (64 hex
digits, with a runtime prefix such as "cri-containerd-" and a ".scope" suffix under systemd):

    systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
    cgroupfs: /kubepods/burstable/pod<uid>/<id>

Both cgroup v2 (one "0::<path>" line) and v1 (a line per hierarchy) are read. A path may be
relative to the reader's cgroup namespace: cgpu-monitor, itself a pod's container, reads another
pod's cgroupfs path from its own (/kubepods/burstable/pod<its uid>/<its id>) as
"/../../../besteffort/pod<uid>/<id>", with no "kubepods" left in it. So only the pod and container
parts decide: a process outside any pod (the host, a system daemon, a container of no pod) has no
container.

A container whose cgroupfs is writable can make cgroups below its own and move its processes
there ("<id>.scope/escape", even "<id>.scope/pod<another uid>/<another id>"): the parts kubelet
made come first and a container can only add parts after them, so the first pod part and the
first container part after it are the process's. A process moved out of its container's cgroup
altogether (which takes the host's cgroupfs) is still in its container's PID namespace: it belongs
to the container whose other processes are in that namespace, unless that is the host's (every
hostPID pod shares it) or more than one container's (shareProcessNamespace).

This needs the host's PID namespace (hostPID: the PIDs NVML reports are the host's, and /proc
must show those processes); /proc/<pid>/cgroup is readable by every user, /proc/<pid>/ns/pid by
the process's own user (the fallback ties what it can read and leaves the rest untied).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})", re.ASCII)
_CONTAINER = re.compile(r"^(?:[a-z0-9]+-)*([0-9a-f]{64})(?:\.scope)?$", re.ASCII)


@dataclass(frozen=True)
class ContainerRef:
    """A container as its cgroup names it: the pod's UID and the runtime's container ID."""

    pod_uid: str
    container_id: str


def parse(text: str) -> ContainerRef | None:
    """The container of a /proc/<pid>/cgroup text, or None when the process is in no pod."""
    for line in text.splitlines():
        parts = line.split(":", 2)[-1].split("/")
        for at, part in enumerate(parts):
            pod = _POD.search(part)
            if pod is None:
                continue
            for later in parts[at + 1 :]:
                container = _CONTAINER.match(later)
                if container:
                    return ContainerRef(pod.group(1).replace("_", "-"), container.group(1))
            break  # the pod's own cgroup, no container in it
    return None


def container_of(pid: int, proc: Path = Path("/proc")) -> ContainerRef | None:
    """The container of a host process by its cgroup, or None (no such process, or not in a pod)."""
    try:
        return parse((proc / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


def pid_namespace(pid: int | str, proc: Path = Path("/proc")) -> str | None:
    """The PID namespace of a process ("pid:[4026531836]"; "self": the reader's), or None when it
    cannot be read."""
    try:
        return os.readlink(proc / str(pid) / "ns" / "pid")
    except OSError:
        return None


def containers_by_pid_namespace(proc: Path = Path("/proc")) -> dict[str, ContainerRef]:
    """PID namespace -> the one container whose processes are in it, from every process on the
    host that a cgroup ties to a container; the host's namespace and namespaces several containers
    share are left out. The host's is PID 1's and the reader's own (cgpu-monitor runs with hostPID):
    where PID 1's cannot be read (its ns link needs ptrace access to init), a host process moved into
    a pod's cgroup would otherwise tie every host process whose cgroup names no pod to that pod,
    cgpu-monitor's own among them (seen on the H200). Neither known: nothing is tied."""
    hosts = {pid_namespace(1, proc), pid_namespace("self", proc)} - {None}
    if not hosts:
        return {}
    seen: dict[str, ContainerRef | None] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        ref = container_of(int(entry.name), proc)
        namespace = pid_namespace(int(entry.name), proc) if ref is not None else None
        if ref is None or namespace is None or namespace in hosts:
            continue
        seen[namespace] = ref if seen.get(namespace, ref) == ref else None
    return {namespace: ref for namespace, ref in seen.items() if ref is not None}
