"""The CUDA side of tests/gpu/compute_share.sh: one process, one job, one JSON line on stdout.

  bench SECONDS [BARRIER_DIR PEERS]  bf16 8192^3 torch.matmul for SECONDS after a warm-up; with a
                                    barrier folder, the timed part starts once PEERS processes
                                    are warm (each touches ready.<pid> there). {"tflops": ...}
  alloc MIB [HOLD_S]                one allocation of MIB MiB on device 0, kept until the process
                                    ends (HOLD_S more seconds after the line is printed).
                                    {"allocated": true|false, "error": ..., "libvgpu": ...}
  nvml PID...                       where NVML lists each process: {"<pid>": {"compute": MiB or null,
                                    "mps": MiB or null}} (nvmlDeviceGetComputeRunningProcesses and
                                    nvmlDeviceGetMPSComputeRunningProcesses of every GPU)

The environment (MPS pipe folder, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) comes from the shell script; this file sets none of it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

N = 8192
WARMUP_S = 1.0
BATCH = 20


def libvgpu_loaded() -> bool:
    """Whether this process mapped our interposer (it must not, for the driver-limit check)."""
    maps = Path("/proc/self/maps").read_text()
    return "/opt/vgpu" in maps or "libvgpu" in maps


def barrier(folder: Path, peers: int, timeout_s: float = 60.0) -> None:
    (folder / f"ready.{os.getpid()}").touch()
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("ready.*"))) < peers:
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier: only {len(list(folder.glob('ready.*')))} of {peers} peers came")
        time.sleep(0.005)


def bench(seconds: float, folder: Path | None, peers: int) -> dict[str, float]:
    a = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(N, N, device="cuda", dtype=torch.bfloat16)
    start = time.monotonic()
    while time.monotonic() - start < WARMUP_S:
        torch.matmul(a, b)
        torch.cuda.synchronize()
    if folder is not None:
        barrier(folder, peers)
    done = 0
    start = time.perf_counter()
    while True:
        for _batch in range(BATCH):  # ~30 ms per batch at full speed: the clock is read rarely
            torch.matmul(a, b)
        torch.cuda.synchronize()
        done += BATCH
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return {"tflops": round(2 * N**3 * done / elapsed / 1e12, 1), "matmuls": done, "seconds": round(elapsed, 3)}


def alloc(mib: int) -> dict[str, object]:
    torch.cuda.init()
    free, total = torch.cuda.mem_get_info(0)
    try:
        keep = torch.empty(mib * 1024 * 1024, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        ok, error = keep.numel() == mib * 1024 * 1024, ""
    except torch.cuda.OutOfMemoryError as exc:
        ok, error = False, str(exc).splitlines()[0]
    return {
        "allocated": ok,
        "mib": mib,
        "error": error,
        "free_mib": free // 2**20,
        "total_mib": total // 2**20,
        "libvgpu": libvgpu_loaded(),
    }


def nvml_lists(pids: list[int]) -> dict[str, dict[str, int | None]]:
    """Which of NVML's two process lists shows each process, with its memory in MiB (cgpu-monitor
    reads both: vgpu_components.nvml)."""
    import pynvml  # noqa: PLC0415 (only this job needs it)

    pynvml.nvmlInit()
    found: dict[str, dict[str, int | None]] = {str(pid): {"compute": None, "mps": None} for pid in pids}
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            for key, query in (
                ("compute", pynvml.nvmlDeviceGetComputeRunningProcesses),
                ("mps", pynvml.nvmlDeviceGetMPSComputeRunningProcesses),
            ):
                try:
                    entries = query(handle)
                except pynvml.NVMLError:
                    continue
                for entry in entries:
                    if str(entry.pid) in found:
                        used = entry.usedGpuMemory
                        found[str(entry.pid)][key] = None if used is None else int(used) // 2**20
    finally:
        pynvml.nvmlShutdown()
    return found


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "bench":
        folder = Path(argv[2]) if len(argv) >= 4 else None
        peers = int(argv[3]) if len(argv) >= 4 else 1
        print(json.dumps(bench(float(argv[1]), folder, peers)), flush=True)
        return 0
    if len(argv) in (2, 3) and argv[0] == "alloc":
        print(json.dumps(alloc(int(argv[1]))), flush=True)
        time.sleep(float(argv[2]) if len(argv) == 3 else 0)
        return 0
    if len(argv) >= 2 and argv[0] == "nvml":
        print(json.dumps(nvml_lists([int(pid) for pid in argv[1:]])), flush=True)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
