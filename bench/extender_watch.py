"""What a pod's watch events cost the extender, by cluster size, in process.

The extender follows every pod: through its own watch (each event one JSON line of a whole pod to
decode and one update of the model: extender_pods.PodFeed.event), or, while its poster runs,
through the poster's records (the poster watches and decodes, and sends a pod's record only when
it changed: extender_pods.Changes; the extender decodes the short line and updates the model:
PodFeed.take). This replays a pod's life as the watch shows it (created pending, bound to a GPU,
two status updates, deleted: five events) for --pods pods, on a model of N nodes x 2 GPUs that
already places P pods, and reports the extender's thread CPU per pod both ways. The baseline, in
the same run, is decoding the five lines alone: the floor of any Python watch. A cost per pod
that stays flat from 500 to 50 000 placed pods scales to the largest cluster supported (5000
nodes x 10 pods).

    .venv/bin/python bench/extender_watch.py [--pods 500] [--rounds 5] [--sizes 1000:500,1000:10000,5000:50000]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any

import _components_path
import vgpu_components
from extender_latency import build_model, pod
from fakes import FakeClusterApi
from vgpu_components.extender_pods import Changes, PodFeed
from vgpu_components.extender_verbs import Extender


def placed(template: dict[str, Any], uid: str, node: str, gpu: str, phase: str) -> dict[str, Any]:
    """The pod `template` as the watch shows it bound to `gpu` of `node`."""
    obj = copy.deepcopy(template)
    obj["metadata"].update(uid=uid, name=uid, annotations={"vgpu.io/gpu-uuid": gpu, "vgpu.io/gpu-index": gpu[-1]})
    obj["spec"]["nodeName"] = node
    obj["status"] = {"phase": phase, "conditions": [{"type": t, "status": "True"} for t in ("Initialized", "Ready")]}
    return obj


def lives(nodes: int, pods: int) -> list[str]:
    """Five watch events per pod, as JSON lines: ADDED pending, MODIFIED bound, two MODIFIED status
    updates, DELETED."""
    template = pod(1000)
    lines = []
    for i in range(pods):
        node = f"node-{i % nodes:04d}"
        pending = copy.deepcopy(template)
        pending["metadata"].update(uid=f"new-{i}", name=f"new-{i}")
        bound = placed(template, f"new-{i}", node, f"GPU-{i % nodes:04d}-1", "Pending")
        running = placed(template, f"new-{i}", node, f"GPU-{i % nodes:04d}-1", "Running")
        for kind, obj in (("ADDED", pending), ("MODIFIED", bound), ("MODIFIED", running), ("MODIFIED", running)):
            lines.append(json.dumps({"type": kind, "object": obj}))
        lines.append(json.dumps({"type": "DELETED", "object": running}))
    return lines


def feed_with(nodes: int, already: int) -> PodFeed:
    """The pods' feed of an extender whose model has `nodes` nodes x 2 GPUs and `already` running
    pods on them."""
    extender = Extender(build_model(nodes, 2), FakeClusterApi())
    assert extender.pods is not None
    template = pod(100)
    for i in range(already):
        extender.pods.event(
            "ADDED", placed(template, f"old-{i}", f"node-{i % nodes:04d}", f"GPU-{i % nodes:04d}-0", "Running")
        )
    return extender.pods


def records_of(lines: list[str]) -> list[bytes]:
    """The poster's lines for the watch's lines: a record only when it changed."""
    changes = Changes("vgpu.io")
    out = []
    for line in lines:
        event = json.loads(line)
        message = changes.event(event["type"], event["object"])
        if message is not None:
            out.append(json.dumps(message, separators=(",", ":")).encode())
    return out


def cpu_per_pod(lines: list[str], feed: PodFeed | None, pods: int) -> float:
    """Thread CPU microseconds per pod of the watch's lines: decoded, and handed to the extender's
    own watch when there is a feed."""
    started = time.thread_time()
    for line in lines:
        event = json.loads(line)
        if feed is not None:
            feed.event(event["type"], event["object"])
    return (time.thread_time() - started) / pods * 1e6


def cpu_per_pod_of_records(records: list[bytes], feed: PodFeed, pods: int) -> float:
    """Thread CPU microseconds per pod of the poster's lines, taken in by the extender."""
    started = time.thread_time()
    for line in records:
        feed.take(line, feed.source)
    return (time.thread_time() - started) / pods * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=500, help="pods whose lives are replayed (5 events each)")
    parser.add_argument("--rounds", type=int, default=5, help="replays per size; the median is reported")
    parser.add_argument("--sizes", default="1000:500,1000:10000,5000:50000", help="NODES:PLACED_PODS,...")
    args = parser.parse_args(argv)
    print(f"checkout {_components_path.ROOT}, components from {Path(vgpu_components.__file__).parent}")
    print(
        f"{'nodes':>6} {'placed':>7} {'decode us/pod':>14} {'own watch us/pod':>17} "
        f"{'poster records us/pod':>22} {'records/pod':>12} {'own/records':>12}"
    )
    for size in args.sizes.split(","):
        nodes, already = (int(part) for part in size.split(":"))
        feed = feed_with(nodes, already)
        lines = lives(nodes, args.pods)
        records = records_of(lines)
        decode, own, taken = [], [], []
        for _round in range(args.rounds):  # each life ends deleted: the model is as before
            decode.append(cpu_per_pod(lines, None, args.pods))
            own.append(cpu_per_pod(lines, feed, args.pods))
            taken.append(cpu_per_pod_of_records(records, feed, args.pods))
        d, o, r = statistics.median(decode), statistics.median(own), statistics.median(taken)
        per_pod = len(records) / args.pods
        print(f"{nodes:>6} {already:>7} {d:>14.1f} {o:>17.1f} {r:>22.1f} {per_pod:>12.1f} {o / r:>12.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
