"""Interposer overhead on a GPU host: native driver against libvgpu, interleaved in one run.

Each round runs every benchmark once natively and once through the interposer (the order
alternates between rounds), each in a fresh process; the result is the median over the rounds.

    python3 bench/libvgpu_bench.py --prefix /opt/vgpu [--rounds 7] [--json out.json]

Benchmarks: cuMemAlloc_v2+cuMemFree_v2 of 1 MiB, an empty kernel launch, a PyTorch small-op
loop, and process start to the first allocation, each process against process; then the
allocation pair and the launch again with native and interposed calls alternating in batches
inside one process (21 batches a round), which takes out the spread between processes. The
interposer runs with a 100 GiB quota, so every allocation goes through admission and accounting.
The same in-process comparison states what the accounting of issue 24 costs: a stream-ordered
cuMemAllocAsync+cuMemFreeAsync pair (the pool's charge), a cuModuleLoadData+cuModuleUnload of an
empty module (measured: two NVML queries around the JIT), and the allocation pair near the limit
(a 1024 MiB quota: each allocation asks NVML for the container's processes).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

Env = dict[str, str]
Bench = Callable[[Env], float]

HERE = Path(__file__).resolve().parent
TORCH_LOOP = """
import time, torch
x = torch.zeros(1024, device="cuda")
for _ in range(2000):
    x.add_(1.0)
torch.cuda.synchronize()
n, batches = 5000, []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1.0)
    torch.cuda.synchronize()
    batches.append((time.perf_counter() - t0) / n * 1e9)
print(sorted(batches)[2])
"""


# (mode of the C program, result name, batch size, environment of the interposer)
IN_PROCESS: tuple[tuple[str, str, int, Env], ...] = (
    ("ab-alloc", "in_process_alloc_free_1MiB_us", 1000, {}),
    ("ab-launch", "in_process_launch_us", 5000, {}),
    ("ab-launch-lib", "in_process_launch_library_kernel_us", 5000, {}),
    ("ab-async", "in_process_async_alloc_free_1MiB_us", 1000, {}),
    ("ab-module", "in_process_module_load_unload_us", 20, {}),
    # a 1024 MiB quota: context + 1 MiB is within the 512 MiB allowance, so every allocation asks NVML
    ("ab-alloc", "in_process_alloc_free_near_limit_us", 200, {"VGPU_MEMORY_LIMIT": "1024MiB"}),
)


def build(workdir: Path) -> Path:
    """Compile the C micro-benchmarks with gcc (no CUDA toolkit needed)."""
    exe = workdir / "libvgpu_bench"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "libvgpu_bench.c"), "-ldl"], check=True)
    return exe


def environments(prefix: Path, region: Path) -> dict[str, dict[str, str]]:
    native = dict(os.environ)
    vgpu = dict(os.environ)
    old = native.get("LD_LIBRARY_PATH", "")
    vgpu["LD_LIBRARY_PATH"] = f"{prefix}:{old}" if old else str(prefix)
    vgpu["VGPU_MEMORY_LIMIT"] = "100GiB"
    vgpu["VGPU_REGION_DIR"] = str(region)
    vgpu["VGPU_CONFIG_FILE"] = ""
    for key in ("VGPU_MEMORY_LIMIT", "VGPU_REGION_DIR", "VGPU_CONFIG_FILE"):
        native.pop(key, None)
    return {"native": native, "vgpu": vgpu}


def run_value(cmd: list[str], env: dict[str, str]) -> float:
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def real_libcuda(exe: Path, env: Env) -> str:
    """The driver library the interposer forwards to, as it reports it."""
    out = subprocess.run(
        [str(exe), "first-alloc"], env={**env, "VGPU_LOG_LEVEL": "2"}, capture_output=True, text=True, check=True
    )
    for line in out.stderr.splitlines():
        if "real libcuda.so.1 is " in line:
            return line.split("real libcuda.so.1 is ", 1)[1].split()[0]
    raise RuntimeError(f"the interposer did not report its driver: {out.stderr}")


def in_process(exe: Path, mode: str, *, prefix: Path, real: str, env: Env, batch: int) -> tuple[float, float]:
    """Native and interposed calls in one process, alternating batches: (native, interposer) ns."""
    cmd = [str(exe), mode, str(prefix / "libcuda.so.1"), real, str(batch), "21"]
    out = subprocess.run(cmd, env={**env, "VGPU_REAL_LIBCUDA": real}, check=True, capture_output=True, text=True)
    native, vgpu = out.stdout.split()
    return float(native), float(vgpu)


def first_alloc_ms(exe: Path, env: dict[str, str]) -> float:
    """Wall time from spawning the process to its first successful allocation."""
    t0 = time.time_ns()
    done = run_value([str(exe), "first-alloc"], env)
    return (done - t0) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", type=Path, default=Path("/opt/vgpu"), help="where libvgpu is installed")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--skip-torch", action="store_true", help="no PyTorch on this host")
    parser.add_argument(
        "--in-process-only",
        action="store_true",
        help="only the in-process comparisons (the overhead targets; the process rounds take minutes)",
    )
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be at least 5")

    workdir = Path(tempfile.mkdtemp(prefix="vgpu-bench-"))
    region = workdir / "region"
    region.mkdir()
    exe = build(workdir)
    envs = environments(args.prefix, region)
    benches: dict[str, tuple[str, Bench]] = {
        "alloc_free_1MiB_us": ("us", lambda env: run_value([str(exe), "alloc", "2000"], env) / 1e3),
        "empty_launch_us": ("us", lambda env: run_value([str(exe), "launch", "2000"], env) / 1e3),
        "start_to_first_alloc_ms": ("ms", lambda env: first_alloc_ms(exe, env)),
    }
    if not args.skip_torch:
        benches["torch_small_op_us"] = ("us", lambda env: run_value([sys.executable, "-c", TORCH_LOOP], env) / 1e3)

    samples: dict[str, dict[str, list[float]]] = {name: {"native": [], "vgpu": []} for name in benches}
    for r in range(0 if args.in_process_only else args.rounds):
        order = ["native", "vgpu"] if r % 2 == 0 else ["vgpu", "native"]
        for name, (_unit, fn) in benches.items():
            for mode in order:
                samples[name][mode].append(fn(envs[mode]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    # The same operations with native and interposed calls alternating inside one process, which
    # removes the process-to-process spread of the GPU's allocator and clocks.
    real = real_libcuda(exe, envs["vgpu"])
    units = {name: unit for name, (unit, _fn) in benches.items()}
    for mode, name, batch, extra in IN_PROCESS:
        samples[name] = {"native": [], "vgpu": []}
        units[name] = "us"
        for _round in range(args.rounds):
            nat, vg = in_process(exe, mode, prefix=args.prefix, real=real, env={**envs["vgpu"], **extra}, batch=batch)
            samples[name]["native"].append(nat / 1e3)
            samples[name]["vgpu"].append(vg / 1e3)

    results = {}
    print(f"driver: {real}")
    print(f"{'benchmark':32} {'native':>10} {'libvgpu':>10} {'ratio':>7}  (median of {args.rounds} rounds)")
    for name, unit in units.items():
        if not samples[name]["native"]:
            continue
        nat = statistics.median(samples[name]["native"])
        vg = statistics.median(samples[name]["vgpu"])
        results[name] = {
            "unit": unit,
            "native": nat,
            "vgpu": vg,
            "ratio": vg / nat,
            "delta": vg - nat,
            "samples": samples[name],
        }
        print(f"{name:32} {nat:10.3f} {vg:10.3f} {vg / nat:7.3f}  (delta {vg - nat:+.3f} {unit})")
    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "driver": real, "results": results}, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
