"""What one pod watch event costs the extender, by cluster size, in process.

The extender follows every pod through its watch: each event is one JSON line to decode and one
update of the model (extender_verbs.Extender._pod_event). This replays a pod's life as the watch
shows it (created pending, bound to a GPU, two status updates, deleted: five events) for --pods
pods, on a model of N nodes x 2 GPUs that already places P pods, and reports the thread CPU per
event. The baseline, in the same run, is decoding the same lines alone: the floor of any Python
watch. A model whose cost per event stays flat from 500 to 50 000 placed pods scales to the
largest cluster supported (5000 nodes x 10 pods).

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


def extender_with(nodes: int, already: int) -> Extender:
    """An extender whose model has `nodes` nodes x 2 GPUs and `already` running pods on them."""
    extender = Extender(build_model(nodes, 2))
    template = pod(100)
    for i in range(already):
        extender._pod_event(
            "ADDED", placed(template, f"old-{i}", f"node-{i % nodes:04d}", f"GPU-{i % nodes:04d}-0", "Running")
        )
    return extender


def cpu_per_event(lines: list[str], extender: Extender | None) -> float:
    """Thread CPU microseconds per line: decoded, and handed to the extender when there is one."""
    started = time.thread_time()
    for line in lines:
        event = json.loads(line)
        if extender is not None:
            extender._pod_event(event["type"], event["object"])
    return (time.thread_time() - started) / len(lines) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=500, help="pods whose lives are replayed (5 events each)")
    parser.add_argument("--rounds", type=int, default=5, help="replays per size; the median is reported")
    parser.add_argument("--sizes", default="1000:500,1000:10000,5000:50000", help="NODES:PLACED_PODS,...")
    args = parser.parse_args(argv)
    print(f"checkout {_components_path.ROOT}, components from {Path(vgpu_components.__file__).parent}")
    print(f"{'nodes':>6} {'placed':>7} {'decode us/event':>16} {'decode+model us/event':>22} {'ratio':>6}")
    for size in args.sizes.split(","):
        nodes, already = (int(part) for part in size.split(":"))
        extender = extender_with(nodes, already)
        lines = lives(nodes, args.pods)
        decode, total = [], []
        for _round in range(args.rounds):
            decode.append(cpu_per_event(lines, None))
            total.append(cpu_per_event(lines, extender))  # each life ends deleted: the model is as before
        d, t = statistics.median(decode), statistics.median(total)
        print(f"{nodes:>6} {already:>7} {d:>16.1f} {t:>22.1f} {t / d:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
