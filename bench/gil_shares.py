"""Who held the extender's interpreter lock: py-spy's folded stacks (bench/profile_extender_gil.sh)
summed into the parts of docs/benchmarks.md's table.

    python bench/gil_shares.py OUT_DIR/extender-gil-*.txt [--pods N]

Each line of a folded file is a stack, root first, frames joined by ";", then its sample count;
with --threads its first frame names the thread ("thread (1234): sync-pods"). A sample is given
to its thread's part for the threads that do one thing (the pod and node watches, the TLS
handshakes, the worker threads), else to the part of its leaf-most frame that has one (JSON
before the verb that called it, the model before the verb). With --pods (the pods placed while
the samples were taken) it also prints milliseconds of the lock per pod, 4 ms a sample at 250 Hz.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from collections.abc import Iterable
from pathlib import Path

# Threads that do one thing, by name (extender.py, kube.Informer, extender_http.py).
THREADS = (
    ("sync-pods", "pod watch: reading, JSON decoding, the model's update"),
    ("sync-nodes", "node watch (kwok's heartbeats)"),
    ("extender-tls", "TLS handshakes (their worker threads)"),
    ("extender-worker", "worker threads (reads from the API: unseen pods, rechecks, preempt)"),
    ("poster-process", "the poster's supervisor thread"),
)
MODEL = "the model: filter's admitted/tightest, bind's reserve"
# (pattern on a frame's file, part), tried on each frame from the leaf up. py-spy names a frame
# "function (file:line)", the file relative to its sys.path entry (json/decoder.py, threading.py).
FILES = (
    (r"(^|/)json/", "JSON decoding and encoding"),
    (r"(^|/)logging/", "logging"),
    (r"(^|/)prometheus_client/", "metrics (prometheus_client)"),
    (r"vgpu_components/(scheduling|preemption|placement)\.py$", MODEL),
    (r"vgpu_components/extender_verbs\.py$", "the verbs' own code (arguments, answers)"),
    (r"vgpu_components/extender_poster\.py$", "bind: messages to and from the poster"),
    (r"vgpu_components/tls\.py$|(^|/)ssl\.py$", "TLS records of kube-scheduler's connections"),
    (r"vgpu_components/extender_http\.py$", "HTTP layer: head, body, answer, timers"),
    (r"(^|/)asyncio/|(^|/)selectors\.py$", "asyncio's loop: selector, callbacks, transports"),
    (r"(^|/)threading\.py$|(^|/)concurrent/", "thread hand-offs"),
)
SAMPLE_MS = 4.0  # profile_extender_gil.sh samples at 250 Hz


def part_of(stack: list[str]) -> str:
    """The part a sampled stack's lock time belongs to."""
    thread = stack[0] if stack and stack[0].startswith("thread (") else ""
    name = thread.partition("): ")[2]
    for prefix, part in THREADS:
        if name.startswith(prefix):
            return part
    for frame in reversed(stack):
        where = frame[frame.rfind("(") + 1 : frame.rfind(":")]
        for pattern, part in FILES:
            if re.search(pattern, where):
                return part
    return "other"


def shares(lines: Iterable[str]) -> collections.Counter[str]:
    """Samples per part, from py-spy's folded lines ("frame;frame;... count")."""
    counts: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack, _sep, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [frame for frame in stack.split(";") if not frame.startswith("process ")]
        counts[part_of(frames)] += int(count)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0] if __doc__ else None)
    parser.add_argument("files", type=Path, nargs="+", help="py-spy's folded output (--format raw)")
    parser.add_argument("--pods", type=int, default=0, help="pods placed while the samples were taken")
    args = parser.parse_args(argv)
    counts: collections.Counter[str] = collections.Counter()
    for path in args.files:
        counts += shares(path.read_text().splitlines())
    total = sum(counts.values())
    if not total:
        print("no samples: did py-spy attach (see its log beside the files)?", file=sys.stderr)
        return 1
    print(f"{total} samples of the lock's holder ({total * SAMPLE_MS / 1000:.1f} s)")
    for part, count in counts.most_common():
        per_pod = f"  {count * SAMPLE_MS / args.pods:.3f} ms/pod" if args.pods else ""
        print(f"{100 * count / total:5.1f}%  {part}{per_pod}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
