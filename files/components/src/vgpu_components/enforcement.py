"""cgpu-monitor's enforcement of the quota from ground truth (the rule is ground_truth.py's).

Every monitor.check_interval_s:
1. NVML's per-process memory on each GPU (host PIDs);
2. each process's container, from its cgroup (cgroups.py), and that container's pod and quota,
   from the pods on this node as the API server lists them: the container whose status carries
   the cgroup's container ID (else the pod's only container with a quota), its quota the units
   it asks for times unit_mib, or, for a container of a DRA claim (vgpu_scheduling dra), its
   claim's quota (claim_quotas: cgpu-monitor's view of kubelet's PodResources and the driver's
   quota files);
3. ground_truth.Tracker; for each violation: a log line, the metrics, a Warning Event
   `GPUMemoryOverQuota` on the pod, and then per monitor.enforcement:
   - evict (the default): the Eviction API, as kubelet evicts a pod over its ephemeral-storage
     limit. A PodDisruptionBudget may refuse it (429): an Event `GPUMemoryEvictionRefused` says
     so and the next check tries again.
   - report: nothing more.

Processes outside pods, and pods holding no units (the MPS server among them), are exported as
unaccounted memory per GPU, never acted on. Needs: the host's PID namespace (hostPID), and from
the API server `get`/`list` of pods, `create` of events and of pods/eviction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_components import cgroups, ground_truth, kube, nvml
from vgpu_components.ground_truth import Container, Owner, Usage, Violation
from vgpu_components.scheduling import container_units

log = logging.getLogger("vgpu.monitor")
MIB = 1024 * 1024
MODES = ("evict", "report")
# (namespace, pod, container) -> quota in bytes, of the containers of DRA claims on this node.
ClaimQuotas = Callable[[], Mapping[tuple[str, str, str], int]]


@dataclass
class Snapshot:
    """What the last check saw, for the metrics."""

    usages: list[Usage] = field(default_factory=list)
    unaccounted: dict[str, int] = field(default_factory=dict)
    limits: dict[Container, int] = field(default_factory=dict)
    over_seconds: dict[Container, float] = field(default_factory=dict)


class Enforcer:
    def __init__(
        self,
        cfg: Mapping[str, Any],
        node: str,
        backend: nvml.GpuBackend,
        pods: kube.PodApi | None,
        proc: Path = Path("/proc"),
        *,
        claim_quotas: ClaimQuotas | None = None,
    ) -> None:
        section = cfg["monitor"]
        self.node = node
        self.backend = backend
        self.pods = pods
        self.proc = proc
        self.mode = section["enforcement"]
        self.interval_s = float(section["check_interval_s"])
        self.unit_bytes = int(cfg["unit_mib"]) * MIB
        self.resource = f"{cfg['resource_prefix']}/gpu-memory"
        self.tracker = ground_truth.Tracker(
            float(section["grace_seconds"]), int(section["context_allowance_mib"]) * MIB
        )
        self.latest = Snapshot()
        self.actions: dict[str, int] = {"evicted": 0, "reported": 0, "refused": 0}
        self.check_errors = 0
        self._pods_by_uid: dict[str, dict[str, Any]] = {}
        self.claim_quotas = claim_quotas
        self._claims: Mapping[tuple[str, str, str], int] = {}

    # --- one check ------------------------------------------------------------------------------
    def check(self, now: float | None = None) -> list[Violation]:
        now = time.monotonic() if now is None else now
        seen = [
            (gpu.uuid, p.pid, p.used_bytes) for gpu in self.backend.gpus() for p in self.backend.processes(gpu.uuid)
        ]
        refs = {pid: cgroups.container_of(pid, self.proc) for _gpu, pid, _used in seen}
        if self.pods is not None and any(refs.values()):
            self._pods_by_uid = {p["metadata"]["uid"]: p for p in self.pods.pods_on_node(self.node)}
            self._claims = self._read_claims()
        current, unaccounted = ground_truth.usages(seen, self._owner(refs))
        due = self.tracker.observe(current, now)
        self.latest = Snapshot(
            current,
            unaccounted,
            {u.container: self.tracker.limit(u) for u in current},
            {u.container: self.tracker.over_seconds(u.container, now) for u in current},
        )
        for violation in due:
            self._act(violation)
        return due

    def _owner(self, refs: Mapping[int, cgroups.ContainerRef | None]) -> Callable[[int], Owner | None]:
        def owner(pid: int) -> Owner | None:
            ref = refs.get(pid)
            pod = self._pods_by_uid.get(ref.pod_uid) if ref is not None else None
            if ref is None or pod is None:
                return None
            return self._container_of(pod, ref.container_id)

        return owner

    def _read_claims(self) -> Mapping[tuple[str, str, str], int]:
        if self.claim_quotas is None:
            return {}
        try:
            return self.claim_quotas()
        except Exception as exc:  # kubelet away: the claims' containers go unenforced this check
            log.warning("cannot read the DRA claims' quotas: %s", exc)
            return {}

    def _container_of(self, pod: Mapping[str, Any], container_id: str) -> Owner | None:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        meta = pod["metadata"]
        containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        quotas = {
            c.get("name"): self._units(c) * self.unit_bytes
            or self._claims.get((meta["namespace"], meta["name"], str(c.get("name"))), 0)
            for c in containers
        }
        statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
        name = next(
            (s.get("name") for s in statuses if str(s.get("containerID", "")).endswith(f"://{container_id}")), None
        )
        if name is None:  # no status with that ID yet: the pod's only container with a quota
            holders = [n for n, q in quotas.items() if q]
            name = holders[0] if len(holders) == 1 else None
        if name is None:
            return None
        container = Container(meta["namespace"], meta["name"], str(name), meta["uid"])
        return Owner(container, quotas.get(name, 0))

    def _units(self, container: Mapping[str, Any]) -> int:
        try:
            return container_units(container, self.resource)
        except ValueError:
            return 0

    # --- acting on a violation -------------------------------------------------------------------
    def _act(self, violation: Violation) -> None:
        message = violation.describe()
        who = violation.container
        log.warning("%s: %s", who, message, extra={"enforcement": self.mode})
        pod = self._pods_by_uid.get(who.pod_uid)
        if self.pods is None or pod is None:
            self.actions["reported"] += 1
            return
        action = "evicting the pod" if self.mode == "evict" else "reported only (monitor.enforcement: report)"
        self._event(pod, "GPUMemoryOverQuota", f"{message}; {action}")
        if self.mode != "evict":
            self.actions["reported"] += 1
            return
        try:
            self.pods.evict(who.namespace, who.pod)
            self.actions["evicted"] += 1
        except kube.EvictionRefused as exc:
            self.actions["refused"] += 1
            self._event(pod, "GPUMemoryEvictionRefused", f"{exc}; trying again at the next check")
            self.tracker.retry(who)
        except Exception as exc:
            log.error("could not evict %s/%s: %s; trying again at the next check", who.namespace, who.pod, exc)
            self.tracker.retry(who)

    def _event(self, pod: dict[str, Any], reason: str, message: str) -> None:
        assert self.pods is not None
        try:
            self.pods.pod_event(pod, reason, message)
        except Exception as exc:
            log.warning("could not post event %s: %s", reason, exc)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as exc:
                self.check_errors += 1
                if self.check_errors in (1, 10) or self.check_errors % 100 == 0:
                    log.warning("ground-truth check failed (%d times): %s", self.check_errors, exc)
