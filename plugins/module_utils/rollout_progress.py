# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Waiting on a rollout by its progress, not by the clock (issue 27, the rollout_wait module).

A rollout on a loaded machine is slow, not broken. The wait goes on while the rollout shows
something it has not shown before in this wait: a new generation observed, more pods scheduled,
updated or ready, a pod created, bound, started, Ready or gone. It fails only when nothing new has
been seen for the stall period. States seen before do not count: a pod in a crash loop goes back
and forth between the same states, and that is a stall.

The objects are Kubernetes objects as the API serves them (JSON: camelCase keys).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, FrozenSet, Hashable, List, NamedTuple, Optional, Tuple

KINDS = ("DaemonSet", "Deployment")
SHOWN_PODS = 10  # pods named per workload in a summary; a large cluster's list would drown the message


class Rollout(NamedTuple):
    """What one workload shows now: done, a line for people, and the facts progress is judged by."""

    name: str
    done: bool
    summary: str
    facts: FrozenSet[Hashable]


class ReadError(Exception):
    """The API could not be read this time (a loaded API server): no progress, no verdict."""


class Stalled(Exception):
    """Nothing new for the stall period; the message says what was last seen, `rollouts` holds it."""

    def __init__(self, message: str, rollouts: List[Rollout]) -> None:
        super().__init__(message)
        self.rollouts = rollouts


def _get(obj: Optional[Dict[str, Any]], *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def workload_name(obj: Dict[str, Any]) -> str:
    return "%s %s/%s" % (obj.get("kind"), _get(obj, "metadata", "namespace"), _get(obj, "metadata", "name"))


def label_selector(selector: Optional[Dict[str, Any]]) -> str:
    """A workload's spec.selector as the label selector string a pod list takes."""
    parts = ["%s=%s" % item for item in sorted((_get(selector, "matchLabels") or {}).items())]
    for expression in _get(selector, "matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = ",".join(expression.get("values") or [])
        parts.append(
            {
                "In": "%s in (%s)" % (key, values),
                "NotIn": "%s notin (%s)" % (key, values),
                "Exists": key,
                "DoesNotExist": "!" + key,
            }[operator]
        )
    return ",".join(parts)


def _container_state(status: Dict[str, Any]) -> Tuple[str, str]:
    for kind in ("waiting", "running", "terminated"):
        state = _get(status, "state", kind)
        if state is not None:
            return kind, state.get("reason") or ""
    return "unknown", ""


def pod_facts(pod: Dict[str, Any]) -> Tuple[Hashable, ...]:
    """What a pod shows of its progress. Restart counts and times are left out: a crash loop
    repeats the same facts."""
    status = pod.get("status") or {}
    conditions = tuple(sorted((c.get("type"), c.get("status")) for c in status.get("conditions") or []))
    containers = tuple(
        sorted((c.get("name"), c.get("ready"), _container_state(c)) for c in status.get("containerStatuses") or [])
    )
    return (
        "pod",
        _get(pod, "metadata", "uid") or _get(pod, "metadata", "name"),
        _get(pod, "metadata", "deletionTimestamp") is not None,
        _get(pod, "spec", "nodeName") or "",
        status.get("phase") or "",
        conditions,
        containers,
    )


def pod_summary(pod: Dict[str, Any]) -> str:
    """One pod for people: where it is and what holds it back."""
    status = pod.get("status") or {}
    node = _get(pod, "spec", "nodeName")
    words = [_get(pod, "metadata", "name") or "?", "on %s" % node if node else "not scheduled"]
    if _get(pod, "metadata", "deletionTimestamp") is not None:
        words.append("terminating")
    words.append(status.get("phase") or "no phase")
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    words.append("Ready" if ready and ready[0].get("status") == "True" else "not Ready")
    containers = status.get("containerStatuses") or []
    if ready and ready[0].get("status") != "True" and containers and all(c.get("ready") for c in containers):
        # The node controller marks a pod not Ready when its node missed heartbeats; the kubelet
        # sets it Ready again once it reports, so this pod's node has not reported since.
        words.append("(its containers are ready: the node has not reported the pod Ready again)")
    for container in containers:
        kind, reason = _container_state(container)
        if kind != "running" or not container.get("ready"):
            words.append("(%s %s%s)" % (container.get("name"), kind, " " + reason if reason else ""))
    scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    if scheduled and scheduled[0].get("status") == "False" and scheduled[0].get("message"):
        words.append("(%s)" % scheduled[0]["message"])
    return " ".join(words)


def _daemonset(obj: Dict[str, Any]) -> Tuple[bool, str, Tuple[Hashable, ...]]:
    status = obj.get("status") or {}
    generation = _get(obj, "metadata", "generation") or 0
    observed = status.get("observedGeneration") or 0
    desired = status.get("desiredNumberScheduled") or 0
    updated = status.get("updatedNumberScheduled") or 0
    ready = status.get("numberReady") or 0
    available = status.get("numberAvailable") or 0
    on_delete = _get(obj, "spec", "updateStrategy", "type") == "OnDelete"
    done = observed >= generation and (on_delete or updated >= desired) and available >= desired
    summary = "generation %d (observed %d), %d of %d pods updated, %d ready, %d available" % (
        generation,
        observed,
        updated,
        desired,
        ready,
        available,
    )
    return done, summary, ("status", generation, observed, desired, updated, ready, available)


def _deployment(obj: Dict[str, Any]) -> Tuple[bool, str, Tuple[Hashable, ...]]:
    status = obj.get("status") or {}
    generation = _get(obj, "metadata", "generation") or 0
    observed = status.get("observedGeneration") or 0
    wanted = _get(obj, "spec", "replicas")
    wanted = 1 if wanted is None else wanted
    replicas = status.get("replicas") or 0
    updated = status.get("updatedReplicas") or 0
    ready = status.get("readyReplicas") or 0
    available = status.get("availableReplicas") or 0
    done = observed >= generation and updated >= wanted and replicas <= updated and available >= updated
    summary = "generation %d (observed %d), %d of %d replicas updated, %d ready, %d available, %d in all" % (
        generation,
        observed,
        updated,
        wanted,
        ready,
        available,
        replicas,
    )
    return done, summary, ("status", generation, observed, wanted, replicas, updated, ready, available)


def rollout(obj: Optional[Dict[str, Any]], name: str, pods: List[Dict[str, Any]]) -> Rollout:
    """Where one workload's rollout stands; `obj` None when it does not exist (yet)."""
    if obj is None:
        return Rollout(name, False, "%s: not found" % name, frozenset([("missing",)]))
    done, summary, status = (_daemonset if obj.get("kind") == "DaemonSet" else _deployment)(obj)
    facts = frozenset([status] + [pod_facts(p) for p in pods])
    waiting = [pod_summary(p) for p in pods if not _ready(p)]
    if waiting and not done:
        more = " and %d more" % (len(waiting) - SHOWN_PODS) if len(waiting) > SHOWN_PODS else ""
        summary += "; pods not Ready: " + "; ".join(waiting[:SHOWN_PODS]) + more
    return Rollout(name, done, "%s: %s" % (name, summary), facts)


def _ready(pod: Dict[str, Any]) -> bool:
    if _get(pod, "metadata", "deletionTimestamp") is not None:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in _get(pod, "status", "conditions") or [])


def follow(
    observe: Callable[[], List[Rollout]],
    *,
    stall_seconds: float,
    interval: float,
    setting: str,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Tuple[List[Rollout], float]:
    """observe() until every rollout is done; (the last rollouts, seconds waited). Raises Stalled
    when nothing new was seen for stall_seconds, naming `setting` (what gives a slow machine more time)."""
    start = clock()
    moved = start
    seen: set = set()
    last: List[Rollout] = []
    error = ""
    while True:
        try:
            last = observe()
            error = ""
        except ReadError as err:
            error = str(err)
        now = clock()
        if last and not error and all(r.done for r in last):
            return last, now - start
        new = set()
        if not error:
            new = {(r.name, fact) for r in last for fact in r.facts} - seen
        if new:
            seen |= new
            moved = now
        elif now - moved >= stall_seconds:
            message = stalled_message(
                last, error, still=now - moved, waited=now - start, stall=stall_seconds, setting=setting
            )
            raise Stalled(message, last)
        sleep(interval)


def stalled_message(last: List[Rollout], error: str, *, still: float, waited: float, stall: float, setting: str) -> str:
    pending = [r.summary for r in last if not r.done] or ["nothing read yet"]
    text = "The rollout made no progress for %d s (waited %d s in all). Last seen: %s." % (
        still,
        waited,
        " | ".join(pending),
    )
    if error:
        text += " The last read of the API failed: %s." % error
    hint = "If this machine is just slow, give it more time with %s (now %d s without progress)." % (setting, stall)
    return text + " A rollout that is slow but moving is waited out; one that stands still this long is stuck. " + hint
