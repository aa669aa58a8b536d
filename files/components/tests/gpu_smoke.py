"""GPU smoke test of the components on a real NVIDIA host (run by files/components/tests/gpu_smoke.sh).

1. device plugin: lists the real GPUs through NVML, registers with a kubelet peer (the same gRPC
   FakeKubelet as the unit tests), streams every unit, answers GetPreferredAllocation and Allocate
   with the real GPU's UUID;
2. monitor: exports the real NVML memory (checked against nvidia-smi when it is on PATH);
3. nvidia-mps: starts the real nvidia-cuda-mps-control -f for one allocation's request, with the
   share as its default, and stops it with quit when the request goes. The compute mode is never
   changed.

Prints one JSON line per check and exits non-zero on the first failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from fakes import FakeKubelet
from vgpu_components import config, ids, monitor_collector, mps_requests, mps_supervisor, nvml
from vgpu_components.memory_size import units_for
from vgpu_components.plugin import DevicePlugin

from tests.polling import wait_for


def report(check: str, ok: bool, **details: Any) -> None:
    print(json.dumps({"check": check, "ok": ok, **details}), flush=True)
    if not ok:
        sys.exit(1)


def smoke_device_plugin(backend: nvml.NvmlBackend, root: Path) -> None:
    gpus = backend.gpus()
    report(
        "nvml lists GPUs",
        bool(gpus),
        gpus=[{"uuid": g.uuid, "index": g.index, "total_mib": g.total_mib, "name": g.name} for g in gpus],
    )
    cfg = config.load(None, environ={})
    cfg["state_dir"] = str(root / "state")
    cfg["device_plugin"]["kubelet_dir"] = str(root / "dp")
    (root / "dp").mkdir()
    kubelet = FakeKubelet(root / "dp").start()
    plugin = DevicePlugin(cfg, gpus, "gpu-smoke", backend=backend)
    plugin.start()
    try:
        report("registered with kubelet", kubelet.registered.wait(10))
        devices = kubelet.wait_update(1, timeout=10)
        expected = sum(units_for(g.total_mib, 0, 100) for g in gpus)
        report(
            "ListAndWatch lists every unit",
            len(devices) == expected,
            devices=len(devices),
            expected=expected,
            message_bytes=plugin.message_bytes,
        )
        msgs = kubelet.msgs
        available = [d for d, _health in devices]
        req = msgs.PreferredAllocationRequest(
            container_requests=[
                msgs.ContainerPreferredAllocationRequest(available_deviceIDs=available, allocation_size=30)
            ]
        )
        started = time.perf_counter()
        picked = list(kubelet.stub.GetPreferredAllocation(req, timeout=5).container_responses[0].deviceIDs)
        keys = {d.split("-")[0] for d in picked}
        report(
            "preferred allocation on one GPU",
            len(picked) == 30 and len(keys) == 1,
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
        started = time.perf_counter()
        response = kubelet.stub.Allocate(
            msgs.AllocateRequest(container_requests=[msgs.ContainerAllocateRequest(devices_ids=picked)]), timeout=5
        )
        envs = dict(response.container_responses[0].envs)
        uuid = next(g.uuid for g in gpus if ids.gpu_key(g.uuid) in keys)
        report(
            "Allocate names the real GPU",
            envs.get("NVIDIA_VISIBLE_DEVICES") == uuid and envs.get("VGPU_MEMORY_LIMIT") == "3000MiB",
            envs=envs,
            ms=round((time.perf_counter() - started) * 1000, 3),
        )
    finally:
        plugin.stop()
        kubelet.stop()


def smoke_monitor(backend: nvml.NvmlBackend) -> None:
    cfg = config.load(None, environ={})
    collector = monitor_collector.MonitorCollector(cfg, "gpu-smoke", backend, None)
    server = monitor_collector.serve(collector, 0, "127.0.0.1").start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    finally:
        server.stop()
    totals = {}
    for line in text.splitlines():
        if line.startswith("vgpu_gpu_memory_total_bytes{"):
            labels, value = line.rsplit(" ", 1)
            uuid = labels.split('UUID="', 1)[1].split('"', 1)[0]
            totals[uuid] = int(float(value)) // (1024 * 1024)
    nvml_totals = {g.uuid: g.total_mib for g in backend.gpus()}
    report("monitor exports NVML memory", totals == nvml_totals and all(totals.values()), exported_mib=totals)
    smi = shutil.which("nvidia-smi") or (
        "/usr/local/nvidia/bin/nvidia-smi" if Path("/usr/local/nvidia/bin/nvidia-smi").exists() else None
    )
    if smi:
        out = subprocess.run(
            [smi, "--query-gpu=uuid,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        rows = dict(line.split(", ") for line in out.stdout.strip().splitlines() if ", " in line)
        report(
            "monitor agrees with nvidia-smi",
            all(int(rows[u]) == t for u, t in totals.items() if u in rows),
            nvidia_smi_mib=rows,
        )


def smoke_mps(backend: nvml.NvmlBackend, root: Path) -> None:
    binary = shutil.which("nvidia-cuda-mps-control")
    report("nvidia-cuda-mps-control on PATH", binary is not None, path=os.environ.get("PATH"))
    cfg = config.load(None, environ={})
    cfg["state_dir"] = str(root / "state")
    cfg["mps"].update(
        pipe_dir=str(root / "mps"), log_dir=str(root / "mps" / "log"), control_binary=binary, probe_interval_s=0.5
    )
    manager = mps_supervisor.MpsManager(cfg, backend)
    manager.start()
    thread = threading.Thread(target=manager.run, daemon=True)
    thread.start()
    gpu = backend.gpus()[0]
    request = mps_requests.MpsRequest("00000000000000aa", gpu.uuid, 25, 2048, mps_requests.new_serial())
    mps_requests.write_request(cfg["state_dir"], request)
    try:
        mps_requests.wait_ready(cfg["mps"]["pipe_dir"], request, timeout_s=30)
        ready = True
    except mps_requests.MpsNotReady as exc:
        ready = False
        report("the allocation's MPS daemon started", False, reason=str(exc), healthz=manager.healthy())
    daemon = manager.daemons[request.alloc_id]
    answer = daemon.control("get_default_active_thread_percentage")
    report("the allocation's MPS daemon has its share as its default", ready and answer[0], answer=answer)
    process = daemon.process
    mps_requests.remove_request(cfg["state_dir"], request.alloc_id)
    with contextlib.suppress(TimeoutError):  # reported just below
        wait_for("the MPS daemon to quit", lambda: process is None or process.poll() is not None, 30, 0.1)
    report(
        "the MPS daemon quit with its allocation",
        process is not None and process.returncode == 0,
        returncode=process.returncode if process else None,
    )
    manager.stopping.set()
    thread.join(5)
    manager.stop()
    report("the compute mode is untouched", backend.compute_mode(gpu.uuid) == nvml.COMPUTE_MODE_DEFAULT)


def main() -> int:
    backend = nvml.NvmlBackend()
    with tempfile.TemporaryDirectory(prefix="vgpu-smoke") as tmp:
        root = Path(tmp)
        smoke_device_plugin(backend, root)
        smoke_monitor(backend)
        smoke_mps(backend, root)
    backend.close()
    print(json.dumps({"check": "all", "ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
