"""cgpu-monitor over real HTTP, with a real PodResources gRPC server and region files written in
the layout of files/libvgpu/docs/region-format.md. NVML is FakeGpus (no GPU on the CI machine).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import GPUS, Exporter, value, write_quota
from vgpu_components import ids, monitor, region

from tests.polling import wait_for

MIB = 1024 * 1024
KEY0 = ids.gpu_key(GPUS[0].uuid)
KEY1 = ids.gpu_key(GPUS[1].uuid)


def write_region(
    path: Path, limit: int, used: int, ctx: int, peak: int, *, oom: int = 0, seq: int = 2, magic: int = 0x55504756
) -> None:
    """A version-1 region file as libvgpu lays it out (header, device record 0, empty slots)."""
    buf = bytearray(region.FILE_SIZE)
    struct.pack_into(
        "<IIIIIIIIQQQIIQQII",
        buf,
        0,
        magic,
        1,
        4096,
        128,
        16,
        1024,
        1024,
        1,
        region.FILE_SIZE,
        seq,
        1_700_000_000_000_000_000,
        0b11,
        1,
        0,
        1_700_000_001_000_000_000,
        0,
        0,
    )
    struct.pack_into("<QQQQQ", buf, 1024, limit, used, ctx, peak, 1)
    struct.pack_into("<II", buf, 1024 + 112, 1, oom)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(buf))


@pytest.fixture
def exporter(short_tmp: Path) -> Iterator[Exporter]:
    e = Exporter(short_tmp)
    yield e
    e.stop()


def test_gpu_memory_from_nvml(exporter: Exporter) -> None:
    exporter.backend.used_mib[GPUS[1].uuid] = 5000
    m = exporter.scrape()
    assert value(m, "vgpu_gpu_memory_total_bytes", gpu="0", UUID=GPUS[0].uuid, Hostname="node-a") == 12288 * MIB
    assert value(m, "vgpu_gpu_memory_used_bytes", gpu="1", modelName="Fake 12G") == 5000 * MIB


def test_container_quota_used_and_peak_from_its_region(exporter: Exporter) -> None:
    held = [f"{KEY0}-{n}" for n in range(30)]
    exporter.pod_resources.holders = [("ml", "trainer-0", "main", "vgpu.io/gpu-memory", held)]
    write_quota(exporter.cfg["state_dir"], ids.alloc_id(held), "0:3000MiB")
    write_region(
        region.region_path(exporter.cfg["state_dir"], ids.alloc_id(held)),
        limit=3000 * MIB,
        used=1200 * MIB,
        ctx=300 * MIB,
        peak=1600 * MIB,
        oom=2,
    )
    m = exporter.scrape()
    who = {"namespace": "ml", "pod": "trainer-0", "container": "main", "gpu": "0", "UUID": GPUS[0].uuid}
    assert value(m, "vgpu_container_memory_quota_bytes", **who) == 3000 * MIB
    assert value(m, "vgpu_container_memory_used_bytes", **who) == 1200 * MIB
    assert value(m, "vgpu_container_memory_context_bytes", **who) == 300 * MIB
    assert value(m, "vgpu_container_memory_peak_bytes", **who) == 1600 * MIB
    assert value(m, "vgpu_container_oom_refusals_total", **who) == 2
    assert value(m, "vgpu_gpu_memory_allocated_bytes", gpu="0") == 3000 * MIB
    assert value(m, "vgpu_gpu_memory_allocated_bytes", gpu="1") == 0


def test_claim_container_on_the_dra_path_has_its_quota_and_usage(exporter: Exporter) -> None:
    """A container of a DRA claim (vgpu_scheduling: dra) holds no device-plugin IDs: kubelet lists
    its claim's devices, with the CDI device the driver prepared, whose name carries the alloc-id."""
    aid = "0123456789abcdef"
    write_quota(exporter.cfg["state_dir"], aid, "0:3000MiB")
    write_region(
        region.region_path(exporter.cfg["state_dir"], aid), limit=3000 * MIB, used=1200 * MIB, ctx=0, peak=1200 * MIB
    )
    exporter.pod_resources.claims = [
        ("ml", "claimer", "app", "gpu.vgpu.io", "gpu-1", [f"vgpu.io/claim={aid}", "vgpu.io/claim=uid.gpu.gpu"]),
        # another driver's claim in the same pod is not ours
        ("ml", "claimer", "app", "other.example.com", "gpu-0", ["example.com/dev=x"]),
    ]
    assert exporter.collector.quotas() == {("ml", "claimer", "app"): 3000 * MIB}  # for the enforcer
    calls = exporter.pod_resources.calls
    m = exporter.scrape()
    assert exporter.pod_resources.calls == calls + 1  # both paths from one List: answers can be megabytes
    who = {"namespace": "ml", "pod": "claimer", "container": "app", "gpu": "1", "UUID": GPUS[1].uuid}
    assert value(m, "vgpu_container_memory_quota_bytes", **who) == 3000 * MIB
    assert value(m, "vgpu_container_memory_used_bytes", **who) == 1200 * MIB
    assert value(m, "vgpu_gpu_memory_allocated_bytes", gpu="1") == 3000 * MIB
    assert value(m, "vgpu_gpu_memory_allocated_bytes", gpu="0") == 0


@pytest.mark.parametrize(
    ("memory_limit", "mib"),
    [("0:3000MiB", 3000), ("3GiB", 3072), ("3000", 3000), ("3000MiB", 3000), ("0:2GiB,1:1000MiB", 2048),
     (" 3 gib ", 3072), ("3000Mi", 3000), ("1TiB", 1024 * 1024)],
)  # fmt: skip
def test_the_quota_is_the_quota_files_in_every_form_libvgpu_reads(
    exporter: Exporter, memory_limit: str, mib: int
) -> None:
    """One quota per container (issue 26 item 3), on both scheduling paths: the quota file the
    device plugin or the DRA driver wrote, read as libvgpu reads it (files/libvgpu/docs/design.md),
    not the device IDs times today's unit_mib (a changed vgpu_memory_unit_mib leaves running
    containers with the quota they started with)."""
    exporter.cfg["unit_mib"] = 50
    held = [f"{KEY0}-{n}" for n in range(30)]
    claim = "0123456789abcdef"
    exporter.pod_resources.holders = [("ml", "plugin", "main", "vgpu.io/gpu-memory", held)]
    exporter.pod_resources.claims = [("ml", "claimer", "app", "gpu.vgpu.io", "gpu-1", [f"vgpu.io/claim={claim}"])]
    for alloc_id in (ids.alloc_id(held), claim):
        write_quota(exporter.cfg["state_dir"], alloc_id, memory_limit)
    m = exporter.scrape()
    assert value(m, "vgpu_container_memory_quota_bytes", pod="plugin") == mib * MIB
    assert value(m, "vgpu_container_memory_quota_bytes", pod="claimer") == mib * MIB
    assert exporter.collector.quotas() == {("ml", "plugin", "main"): mib * MIB, ("ml", "claimer", "app"): mib * MIB}


def test_the_consumers_of_one_shared_claim_are_handed_to_the_enforcer_as_one_allocation(exporter: Exporter) -> None:
    """Issue 40 item 1: two pods naming one claim (its one CDI device) each got its whole quota.
    The enforcer is told which allocation each container's quota is, so it judges them together,
    and the GPU's allocated memory counts the shared allocation once."""
    aid = "0123456789abcdef"
    write_quota(exporter.cfg["state_dir"], aid, "0:1000MiB")
    exporter.pod_resources.claims = [
        ("ml", f"share-{n}", "app", "gpu.vgpu.io", "gpu-1", [f"vgpu.io/claim={aid}"]) for n in range(2)
    ]
    quotas = exporter.collector.quotas()
    assert quotas == {("ml", "share-0", "app"): 1000 * MIB, ("ml", "share-1", "app"): 1000 * MIB}
    assert quotas.allocations == {
        ("ml", "share-0", "app"): frozenset({aid}),
        ("ml", "share-1", "app"): frozenset({aid}),
    }
    assert quotas.allocation_quotas == {aid: 1000 * MIB}
    assert value(exporter.scrape(), "vgpu_gpu_memory_allocated_bytes", gpu="1") == 1000 * MIB


@pytest.mark.parametrize("memory_limit", ["3000MB", "0", "0:1000MiB,0:2000MiB", "-1", "512KiB", "17:100MiB", ""])
def test_a_quota_file_libvgpu_would_refuse_gives_no_quota_and_counts_an_error(
    exporter: Exporter, memory_limit: str
) -> None:
    held = [f"{KEY0}-{n}" for n in range(30)]
    exporter.pod_resources.holders = [("ml", "plugin", "main", "vgpu.io/gpu-memory", held)]
    write_quota(exporter.cfg["state_dir"], ids.alloc_id(held), memory_limit)
    m = exporter.scrape()
    assert not m.get("vgpu_container_memory_quota_bytes")
    assert value(m, "vgpu_monitor_errors_total", source="quota_file") == 1
    assert exporter.collector.quotas() == {("ml", "plugin", "main"): None}  # unknown, not none


def test_idle_allocation_exports_zeros_and_finished_containers_vanish(exporter: Exporter) -> None:
    held = [f"{KEY1}-0", f"{KEY1}-1"]
    exporter.pod_resources.holders = [("default", "idle", "c", "vgpu.io/gpu-memory", held)]
    write_quota(exporter.cfg["state_dir"], ids.alloc_id(held), "0:200MiB")
    m = exporter.scrape()
    who = {"pod": "idle", "container": "c", "gpu": "1"}
    assert value(m, "vgpu_container_memory_quota_bytes", **who) == 200 * MIB
    assert value(m, "vgpu_container_memory_used_bytes", **who) == 0
    assert value(m, "vgpu_container_memory_peak_bytes", **who) == 0
    exporter.pod_resources.holders = []
    m = exporter.scrape()
    assert "vgpu_container_memory_quota_bytes" not in m or not m["vgpu_container_memory_quota_bytes"]


def test_torn_or_foreign_regions_cost_a_sample_not_the_exporter(exporter: Exporter) -> None:
    torn = [f"{KEY0}-{n}" for n in range(10)]
    foreign = [f"{KEY1}-{n}" for n in range(10)]
    exporter.pod_resources.holders = [
        ("default", "torn", "c", "vgpu.io/gpu-memory", torn),
        ("default", "foreign", "c", "vgpu.io/gpu-memory", foreign),
    ]
    state = exporter.cfg["state_dir"]
    write_quota(state, ids.alloc_id(torn), "0:1000MiB")
    write_region(region.region_path(state, ids.alloc_id(torn)), 1000 * MIB, 10 * MIB, 0, 10 * MIB, seq=3)
    write_region(region.region_path(state, ids.alloc_id(foreign)), 1000 * MIB, 10 * MIB, 0, 10 * MIB, magic=1)
    m = exporter.scrape()
    assert value(m, "vgpu_container_memory_quota_bytes", pod="torn") == 1000 * MIB
    assert not [
        lab for lab, _value in m.get("vgpu_container_memory_used_bytes", []) if lab["pod"] in ("torn", "foreign")
    ]
    assert value(m, "vgpu_monitor_errors_total", source="region") == 2


def test_healthz_reports_pod_resources_trouble(exporter: Exporter) -> None:
    exporter.scrape()
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/healthz", timeout=5) as response:
        assert response.status == 200
    exporter.pod_resources.stop()
    exporter.scrape()
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/healthz", timeout=5)
    assert err.value.code == 503


def signal_other_thread(pid: int, sig: int) -> int:
    """Send `sig` to a thread of `pid` other than its main one, as the kernel may when it picks
    the thread that receives a process signal; returns that thread's id."""
    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the process has no thread besides its main one"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, others[-1], sig) != 0:
        raise OSError(ctypes.get_errno(), "tgkill failed")
    return others[-1]


def test_the_cli_serves_metrics_and_stops_on_sigterm(short_tmp: Path) -> None:
    """The real entry point as a process (NVML fails to load here: no driver on the CI machine).
    SIGTERM goes to one of its other threads (the /metrics call started gRPC's): Python runs the
    handler in the main thread only, and the monitor once kept running until it was killed."""
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(monitor.__file__).resolve().parents[1]),
        "VGPU_MONITOR_PORT": "0",
        "VGPU_MONITOR_POD_RESOURCES_SOCKET": str(short_tmp / "absent.sock"),
        "VGPU_LOG_FORMAT": "json",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpu_components.monitor", "--config", str(short_tmp / "none.yaml")],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []

        def logged_port() -> int | None:
            assert proc.stderr is not None
            lines.append(proc.stderr.readline())
            entry = json.loads(lines[-1] or "{}")
            message = entry.get("msg", "")
            return int(message.rsplit(" ", 1)[1]) if message.startswith("serving /metrics on port ") else None

        port = wait_for("the monitor to log its /metrics port", logged_port, 30, 0, seen=lambda: lines[-3:])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert b"vgpu_monitor_errors_total" in response.read()
        signal_other_thread(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
