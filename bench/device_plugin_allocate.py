"""Device plugin latency over its real gRPC unix socket, as kubelet sees it.

An 8 x 141 GiB node at the default 100 MiB unit (11 544 units). Measured per call: Allocate of a
3000 MiB container (30 units; includes writing the quota file and a fresh region folder),
GetPreferredAllocation with every unit available (the largest request kubelet sends), and as the
baseline in the same run the empty GetDevicePluginOptions call: the cost of one gRPC round trip.

    .venv/bin/python bench/device_plugin_allocate.py [--iterations 500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _components_path
from fakes import FakeKubelet
from vgpu_components import config
from vgpu_components.nvml import Gpu
from vgpu_components.plugin import DevicePlugin

GPU_MIB = 141 * 1024


def measure(fn: Callable[[int], None], iterations: int) -> list[float]:
    for i in range(min(20, iterations)):
        fn(i)
    out = []
    for i in range(iterations):
        started = time.perf_counter()
        fn(i)
        out.append((time.perf_counter() - started) * 1000)
    return out


def summary(name: str, samples: list[float]) -> dict[str, Any]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"case": name, "n": len(samples), "p50_ms": round(statistics.median(ordered), 3), "p99_ms": round(p99, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    args = parser.parse_args()
    gpus = [Gpu(uuid=f"GPU-{i:08x}-1111-2222-3333-444444444444", index=i, total_mib=GPU_MIB) for i in range(8)]
    with tempfile.TemporaryDirectory(prefix="vgpu-bench") as tmp:
        root = Path(tmp)
        (root / "dp").mkdir()
        cfg = config.load(None, environ={})
        cfg["state_dir"] = str(root / "state")
        cfg["device_plugin"]["kubelet_dir"] = str(root / "dp")
        kubelet = FakeKubelet(root / "dp").start()
        plugin = DevicePlugin(cfg, gpus, "bench")
        plugin.start()
        try:
            assert kubelet.registered.wait(10)
            devices = [d for d, _health in kubelet.wait_update(1)]
            msgs, stub = kubelet.msgs, kubelet.stub
            per_gpu = len(devices) // 8

            def options(_iteration: int) -> None:
                stub.GetDevicePluginOptions(msgs.Empty(), timeout=5)

            def allocate(i: int) -> None:
                gpu = i % 8
                start = (i // 8 * 30) % (per_gpu - 30)
                ids = devices[gpu * per_gpu + start : gpu * per_gpu + start + 30]
                stub.Allocate(
                    msgs.AllocateRequest(container_requests=[msgs.ContainerAllocateRequest(devices_ids=ids)]),
                    timeout=5,
                )

            preferred_request = msgs.PreferredAllocationRequest(
                container_requests=[
                    msgs.ContainerPreferredAllocationRequest(available_deviceIDs=devices, allocation_size=30)
                ]
            )

            def preferred(_iteration: int) -> None:
                stub.GetPreferredAllocation(preferred_request, timeout=5)

            rows = [
                summary("baseline: GetDevicePluginOptions (empty round trip)", measure(options, args.iterations)),
                summary("Allocate 30 units (3000 MiB)", measure(allocate, args.iterations)),
                summary(f"GetPreferredAllocation from {len(devices)} available", measure(preferred, args.iterations)),
            ]
        finally:
            plugin.stop()
            kubelet.stop()
    print(json.dumps({"src": str(_components_path.ROOT), "gpus": 8, "gpu_mib": GPU_MIB, "units": len(devices)}))
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
