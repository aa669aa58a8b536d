"""Which container a host process belongs to, from its cgroup (/proc/<pid>/cgroup).

The rule: kubelet puts every container in a cgroup whose path names the pod's UID
("pod<uid>", with "_" for "-" under the systemd driver) and ends in the container's ID (64 hex
digits, with a runtime prefix such as "cri-containerd-" and a ".scope" suffix under systemd):

    systemd:  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/cri-containerd-<id>.scope
    cgroupfs: /kubepods/burstable/pod<uid>/<id>

Both cgroup v2 (one "0::<path>" line) and v1 (a line per hierarchy) are read. A path may be
relative to the reader's cgroup namespace: cgpu-monitor, itself a pod's container, reads another
pod's cgroupfs path from its own (/kubepods/burstable/pod<its uid>/<its id>) as
"/../../../besteffort/pod<uid>/<id>", with no "kubepods" left in it. So only the pod and container
parts decide: a process outside any pod (the host, a system daemon, a container of no pod) has no
container.

This needs the host's PID namespace (hostPID: the PIDs NVML reports are the host's, and /proc
must show those processes) and nothing else: /proc/<pid>/cgroup is readable by every user.
"""

from __future__ import annotations

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
        path = line.split(":", 2)[-1]
        pod = _POD.search(path)
        container = _CONTAINER.match(path.rstrip("/").rsplit("/", 1)[-1])
        if pod and container:
            return ContainerRef(pod.group(1).replace("_", "-"), container.group(1))
    return None


def container_of(pid: int, proc: Path = Path("/proc")) -> ContainerRef | None:
    """The container of a host process, or None (no such process, or not in a pod)."""
    try:
        return parse((proc / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
