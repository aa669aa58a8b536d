"""Instructions libvgpu adds to a call pair, counted against the fake driver (no GPU needed).

    python3 bench/libvgpu_instructions.py [--baseline main] [--pairs 2000] [--mode count-async]

Builds libvgpu from this tree and from the baseline ref (git archive of files/libvgpu), the fake
driver of this tree, and bench/libvgpu_bench.c; then, under valgrind --tool=callgrind, counts the
instructions of one batch of pairs (cuMemAllocAsync + cuMemFreeAsync of 1 MiB, or cuMemAlloc_v2 +
cuMemFree_v2 with --mode count-alloc) called straight into the fake driver (native) and through
each build (a 100 GiB quota, so every call is admitted and accounted). Prints instructions per
pair and what each build adds to native. Counts, not times: the same on a busy machine, and what
the H200 bench (bench/libvgpu_bench.py) then confirms in time.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIBVGPU = ROOT / "files" / "libvgpu"


def make(tree: Path, *targets: str) -> Path:
    """Build targets of the libvgpu at tree (files/libvgpu); returns its build folder."""
    cmd = ["make", "-s", "-C", str(tree), "OUT=build/instructions", *targets]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return tree / "build" / "instructions"


def baseline_tree(ref: str, workdir: Path) -> Path:
    """files/libvgpu as it is at ref, unpacked under workdir."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "files/libvgpu"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(workdir)], input=archive, check=True)
    return workdir / "files" / "libvgpu"


def count(exe: Path, mode: str, lib: Path, pairs: int, *, env: dict[str, str], out: Path) -> int:
    """Instructions of counted_batch (one batch of pairs) with lib as the driver."""
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=counted_batch",
            f"--callgrind-out-file={out}",
            str(exe),
            mode,
            str(lib),
            str(pairs),
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="main", help="git ref to compare with (default: main)")
    parser.add_argument("--pairs", type=int, default=2000, help="pairs in the counted batch")
    parser.add_argument("--mode", choices=("count-async", "count-alloc"), default="count-async")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="vgpu-instr-") as tmp:
        workdir = Path(tmp)
        exe = workdir / "libvgpu_bench"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "bench" / "libvgpu_bench.c"), "-ldl"], check=True)
        current = make(LIBVGPU, "all", "fake-driver")
        base = make(baseline_tree(args.baseline, workdir), "all")
        fake = current / "fake"
        env = {
            **os.environ,
            "VGPU_REAL_LIBCUDA": str(fake / "libcuda.so.1"),
            "VGPU_REAL_LIBNVML": str(fake / "libnvidia-ml.so.1"),
            "FAKE_GPU_CONF": "/dev/null",
            "VGPU_MEMORY_LIMIT": "100GiB",
            "VGPU_CONFIG_FILE": "",
            "VGPU_CONTEXT_RESERVE": "0",
            "FAKE_CTX_MIB": "0",
        }
        results: dict[str, float] = {}
        for name, lib in (("native", fake), (f"libvgpu {args.baseline}", base), ("libvgpu this tree", current)):
            region = workdir / f"region-{len(results)}"
            region.mkdir()
            run_env = {**env, "VGPU_REGION_DIR": str(region), "LD_LIBRARY_PATH": str(lib)}
            out = workdir / f"cg-{len(results)}"
            total = count(exe, args.mode, lib / "libcuda.so.1", args.pairs, env=run_env, out=out)
            results[name] = total / args.pairs
    native = results["native"]
    print(f"{args.mode}: instructions per pair, {args.pairs} pairs counted (fake driver)")
    for name, per_pair in results.items():
        print(f"{name:24} {per_pair:9.1f}  (+{per_pair - native:.1f} over native)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
