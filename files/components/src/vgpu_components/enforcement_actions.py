"""What cgpu-monitor does about the violations of one check (enforcement.py finds them, by the rule
of ground_truth.py). A violation is due at every check while its container stays over its limit
with the grace period spent, so what is done is decided here, from what was done before:

- monitor.enforcement evict (the default) stops the container within a bound the operator sets:
  1. the first check it is due: a Warning Event `GPUMemoryOverQuota` on the pod, and the pod deleted
     with a grace period of the shorter of its own (terminationGracePeriodSeconds) and
     monitor.termination_grace_seconds. kubelet sends SIGTERM, and SIGKILL when that grace ends; a
     pod already terminating with a longer grace has it shortened, and kubelet follows;
  2. the first check at least termination_grace_seconds later at which it is still over: an Event,
     and the pod deleted at once (grace period 0): its API object goes, and kubelet kills its
     containers (with its least grace, 1 s). Again at every check while it stays over and listed.
  A pod's own grace period and a PID 1 that ignores SIGTERM no longer decide: a container stays over
  at most grace_seconds (accumulated) plus termination_grace_seconds, rounded up to a check, and then
  kubelet's kill. A delete that fails is tried again at the next check (the violation is due again).
- monitor.enforcement report: the Event, once each time the container becomes due.
- A process in no pod the API server lists here: a Warning Event on the node, once each time it
  becomes due; it cannot be evicted.
docs/security.md says why the pod is deleted (and not its processes killed on the node).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from vgpu_components import kube
from vgpu_components.ground_truth import Container, HostProcess, Violation, Who

log = logging.getLogger("vgpu.monitor")
DEFAULT_POD_GRACE_S = 30  # a pod's terminationGracePeriodSeconds when its spec has none


class Actions:
    def __init__(self, mode: str, termination_grace_s: int, node: str, pods: kube.PodApi | None) -> None:
        self.mode = mode
        self.termination_grace_s = termination_grace_s
        self.node = node
        self.pods = pods
        self.counts: dict[str, int] = {"evicted": 0, "forced": 0, "reported": 0, "unevictable": 0}
        self._deleted: dict[str, tuple[float, int]] = {}  # pod UID -> (when first deleted, grace asked)
        self._forced: set[str] = set()
        self._told: dict[Who, str] = {}  # the last Event posted about each container still due

    def act(self, due: list[Violation], pods_by_uid: Mapping[str, dict[str, Any]], now: float) -> None:
        """Act on this check's violations; what was done for containers no longer due is forgotten."""
        self._told = {who: told for who, told in self._told.items() if who in {v.who for v in due}}
        self._deleted = {uid: first for uid, first in self._deleted.items() if uid in pods_by_uid}
        self._forced &= set(pods_by_uid)
        for violation in due:
            who = violation.who
            message = violation.describe()
            if isinstance(who, HostProcess):
                self._tell_node(who, message)
                continue
            pod = pods_by_uid.get(who.pod_uid)
            if self.pods is None or pod is None:
                self._count_once(who, "reported", message)
            elif self.mode != "evict":
                self._tell(pod, who, "reported", f"{message}; reported only (monitor.enforcement: report)")
            else:
                self._stop(pod, who, message, now)

    def _stop(self, pod: dict[str, Any], who: Container, message: str, now: float) -> None:
        uid = who.pod_uid
        if uid not in self._deleted:
            own = _own_grace(pod)
            grace = min(own, self.termination_grace_s)
            self._tell(
                pod,
                who,
                "deleting",
                f"{message}; deleting the pod with a grace period of {grace} s (its own: {own} s), and at once "
                f"if it is still over {self.termination_grace_s} s later",
            )
            if self._delete(who, grace):
                self._deleted[uid] = (now, grace)
                self.counts["evicted"] += 1
            return
        first, grace = self._deleted[uid]
        if now - first < self.termination_grace_s:
            return  # its capped grace period is still running
        self._tell(
            pod,
            who,
            "forced",
            f"{message}; still over its quota {now - first:.0f} s after it was deleted with a grace period of "
            f"{grace} s: deleting it at once",
        )
        if self._delete(who, 0) and uid not in self._forced:
            self._forced.add(uid)
            self.counts["forced"] += 1

    def _delete(self, who: Container, grace: int) -> bool:
        assert self.pods is not None
        try:
            self.pods.evict(who.namespace, who.pod, who.pod_uid, grace)
        except Exception as exc:
            log.error("could not delete pod %s/%s: %s; trying again at the next check", who.namespace, who.pod, exc)
            return False
        return True

    def _tell(self, pod: dict[str, Any], who: Container, stage: str, message: str) -> None:
        """A log line and the Event on the pod, once per stage while it stays due."""
        if self._told.get(who) == stage:
            return
        self._told[who] = stage
        log.warning("%s: %s", who, message, extra={"enforcement": self.mode})
        if stage == "reported":
            self.counts["reported"] += 1
        assert self.pods is not None
        try:
            self.pods.pod_event(pod, "GPUMemoryOverQuota", message)
        except Exception as exc:
            log.warning("could not post event GPUMemoryOverQuota on %s: %s", who, exc)

    def _count_once(self, who: Who, action: str, message: str) -> bool:
        if self._told.get(who) == action:
            return False
        self._told[who] = action
        self.counts[action] += 1
        log.warning("%s: %s", who, message, extra={"enforcement": self.mode})
        return True

    def _tell_node(self, who: HostProcess, message: str) -> None:
        if not self._count_once(who, "unevictable", message) or self.pods is None:
            return
        try:
            self.pods.node_event(self.node, "GPUMemoryOverQuota", message)
        except Exception as exc:
            log.warning("could not post event GPUMemoryOverQuota on node %s: %s", self.node, exc)


def _own_grace(pod: Mapping[str, Any]) -> int:
    grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return DEFAULT_POD_GRACE_S if grace is None else int(grace)
