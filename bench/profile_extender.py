"""The extender process with every thread under cProfile: where a bind's time goes under a real load.

    python bench/profile_extender.py OUT.pstats [--cpu | --threads] [--switch=S] -- <the extender's arguments>

runs vgpu_components.extender's main() as `python -m vgpu_components.extender` would, with a
profiler in the main thread and in every thread started after it (the HTTP loop, the bind workers,
the informers). At exit (SIGTERM: the extender stops as usual) the threads' profiles are merged
into OUT.pstats and a summary is written next to it (OUT.txt): the top functions by cumulative time,
and who calls what under the bind verb. Wall-clock time by default (a thread's waits on the GIL, on
the API server and on locks count in the function that waits); --cpu times each thread's own CPU.
--threads runs no profiler: OUT.txt gets each thread's CPU seconds (user + system, from
/proc/self/task) by its Python name, the shares without the profiler's overhead. --switch=S sets
the interpreter's GIL switch interval to S seconds (an experiment; VGPU_E2E_EXTENDER_SWITCH=S).

tests/k8s starts the extender so when VGPU_E2E_EXTENDER_PROFILE names the output file
(VGPU_E2E_EXTENDER_PROFILE_MODE=cpu or threads for --cpu or --threads), e.g. for a bench:
VGPU_E2E_EXTENDER_PROFILE=$PWD/build/bench/extender.pstats tests/k8s/scripts/run-bench.sh ...
Call counts are exact either way; the profiler's own overhead inflates the time of Python-heavy
code relative to C and I/O, so read shares of one run, not absolute milliseconds.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import cProfile
import io
import os
import pstats
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()


def _profiler(cpu: bool) -> cProfile.Profile:
    profile = cProfile.Profile(time.thread_time) if cpu else cProfile.Profile()
    with _lock:
        _profiles.append(profile)
    return profile


def _install(cpu: bool) -> None:
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = _profiler(cpu)
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]


def _dump(out: Path) -> None:
    with _lock:
        profiles = list(_profiles)
    stats: pstats.Stats | None = None
    for profile in profiles:
        profile.disable()  # the calling thread's; the others' records are read as they are
        profile.create_stats()
        if not getattr(profile, "stats", None):
            continue
        if stats is None:
            stats = pstats.Stats(profile)
        else:
            stats.add(profile)
    if stats is None:
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    stats.dump_stats(str(out))
    text = io.StringIO()
    report: Any = pstats.Stats(str(out), stream=text)
    report.sort_stats("cumulative").print_stats(60)
    report.print_callees(r"extender_verbs.py:\d+\(_bind\)")
    report.print_callees(r"kube.py:\d+\(bind\)")
    out.with_suffix(".txt").write_text(text.getvalue())


_ended: dict[str, float] = collections.defaultdict(float)


def _name(thread: threading.Thread) -> str:
    return re.sub(r"_[0-9]+$", "", thread.name)  # a pool's workers as one


def _count_threads() -> None:
    """Threads that end before the process (the HTTP loop, the pool's workers) add their CPU here."""
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        try:
            original(self)
        finally:
            with _lock:
                _ended[_name(self)] += time.thread_time()

    threading.Thread.run = run  # type: ignore[method-assign]


def _thread_cpu(out: Path) -> None:
    """Each live thread's CPU seconds by name, and the process's, into OUT.txt."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu(path: str) -> float:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime

    with _lock:
        by_name = collections.defaultdict(float, _ended)
    for thread in threading.enumerate():
        with contextlib.suppress(OSError, TypeError):
            by_name[_name(thread)] += cpu(f"/proc/self/task/{thread.native_id}/stat")
    total = cpu("/proc/self/stat")
    lines = [f"{'process':<28} {total:8.2f} s"]
    lines += [
        f"{name:<28} {seconds:8.2f} s {100 * seconds / total:5.1f} %"
        for name, seconds in sorted(by_name.items(), key=lambda item: -item[1])
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> None:
    if "--" not in argv or not argv or argv[0].startswith("-"):
        raise SystemExit("usage: profile_extender.py OUT.pstats [--cpu] -- <extender arguments>")
    split = argv.index("--")
    options, rest = argv[:split], argv[split + 1 :]
    out, cpu = Path(options[0]), "--cpu" in options[1:]
    from vgpu_components import extender  # noqa: PLC0415 -- after the profiler is in place

    for option in options[1:]:
        if option.startswith("--switch="):  # an experiment: the GIL's switch interval
            sys.setswitchinterval(float(option.split("=", 1)[1]))
    if "--threads" in options[1:]:
        _count_threads()
        atexit.register(_thread_cpu, out)
        sys.exit(extender.main(rest))
    _install(cpu)
    main_profile = _profiler(cpu)
    atexit.register(_dump, out)
    main_profile.enable()
    code = extender.main(rest)
    main_profile.disable()
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
