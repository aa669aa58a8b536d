"""The region contract across languages: the real libvgpu writes, the Python reader reads.

The device plugin's Allocate core makes the quota file and the region folder; libvgpu (built by
files/libvgpu/Makefile, with its fake driver standing in for the GPU, which CI does not have)
runs the test client with the container's environment and writes the region; region.py and
cgpu-monitor read it while the client holds its memory. Their numbers must be the ones the
client caused and the ones libvgpu's own reader (`manage --stats --json`) prints.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import Exporter, Gpu, value
from vgpu_components import allocator, container, ids, quota_file, region
from vgpu_components.host_paths import HostPaths

MIB = 1024 * 1024
LIBVGPU = Path(__file__).resolve().parents[2] / "libvgpu"
BUILD = LIBVGPU / "build" / "rel"
QUOTA_UNITS = 20  # 2000 MiB at the default 100 MiB unit
# The client's steps: 300 + 200 MiB, free the 200, 150 more, then 2000 MiB (over the quota).
STEPS = ["init", "alloc:300", "alloc:200", "free:1", "alloc:150", "alloc:2000", "hold:60"]
USED, CONTEXT, PEAK, LIVE, REFUSED = 450 * MIB, 512 * MIB, 1012 * MIB, 2, 1  # 512: the default charge
# GPU 0 of libvgpu's fake driver (files/libvgpu/tests/README.md): the container's
# NVIDIA_VISIBLE_DEVICES names it, as the device plugin's Allocate does.
GPUS = [Gpu(uuid="GPU-10111213-1415-1617-1819-1a1b1c1d1e1f", index=0, total_mib=8192, name="Fake GPU")]


@pytest.fixture(scope="module")
def libvgpu() -> Path:
    """libvgpu, its fake driver and its test client, built (or brought up to date) by its Makefile."""
    done = subprocess.run(
        ["make", "-s", "-C", str(LIBVGPU), "test-bins"], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"building libvgpu failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return BUILD


@pytest.fixture
def holding_container(libvgpu: Path, short_tmp: Path) -> Iterator[tuple[Exporter, container.Allocation]]:
    """A container set up as the device plugin would (quota file, region folder) whose process
    holds its memory; the monitor follows it through a PodResources server."""
    exporter = Exporter(short_tmp, GPUS)
    table = allocator.DeviceTable(GPUS, unit_mib=100)
    device_ids = table.gpus()[0].device_ids()[:QUOTA_UNITS]
    alloc = container.build_allocation(table, device_ids, exporter.cfg)
    HostPaths(exporter.cfg["state_dir"], grace_s=300).prepare([alloc])
    exporter.pod_resources.holders = [("ns", "pod", "main", "vgpu.io/gpu-memory", device_ids)]
    # The container's environment, its two mounts pointed at their host paths.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPU_", "LD_", "CUDA_"))}
    env.update(alloc.envs)
    env.update(
        VGPU_CONFIG_FILE=str(alloc.quota_host_file),
        VGPU_REGION_DIR=str(alloc.region_host_dir),
        LD_LIBRARY_PATH=str(libvgpu),
        VGPU_REAL_LIBCUDA=str(libvgpu / "fake" / "libcuda.so.1"),
        VGPU_REAL_LIBNVML=str(libvgpu / "fake" / "libnvidia-ml.so.1"),
        FAKE_DRIVER=str(libvgpu / "fake" / "libcuda.so.1"),
    )
    client = subprocess.Popen(
        [str(libvgpu / "vgpu-test-client"), *STEPS], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert client.stdout is not None
        lines = []
        for line in client.stdout:
            lines.append(line.strip())
            if line.startswith("holding"):
                break
        else:
            pytest.fail(
                f"the client never held its memory: {lines}; stderr: {client.stderr.read() if client.stderr else ''}"
            )
        # The steps did what the expected numbers assume.
        assert lines[:6] == [
            "init rc=0",
            "alloc 300 v2 rc=0",
            "alloc 200 v2 rc=0",
            "free 1 rc=0",
            "alloc 150 v2 rc=0",
            "alloc 2000 v2 rc=2",
        ], lines
        yield exporter, alloc
    finally:
        client.kill()
        client.wait()
        exporter.stop()


def test_region_reader_reads_what_libvgpu_wrote(holding_container: tuple[Exporter, container.Allocation]) -> None:
    exporter, alloc = holding_container
    path = region.region_path(exporter.cfg["state_dir"], alloc.alloc_id)
    assert path == alloc.region_host_dir / "vgpu.region"
    sample = region.read(path)
    assert sample is not None and len(sample.devices) == 1
    device = sample.devices[0]
    assert (device.limit_bytes, device.used_bytes, device.ctx_bytes, device.peak_bytes) == (
        QUOTA_UNITS * 100 * MIB,
        USED,
        CONTEXT,
        PEAK,
    )
    assert (device.live_buffers, device.oom_count) == (LIVE, REFUSED)
    assert 0 < sample.created_ns <= sample.updated_ns

    # libvgpu's own reader prints the same numbers.
    stats = subprocess.run(
        [str(BUILD / "manage"), "--stats", "--json", "--no-sweep", "--region", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    printed = json.loads(stats.stdout)["devices"][0]
    assert printed["limit_bytes"] == device.limit_bytes
    assert printed["used_bytes"] == device.used_bytes
    assert printed["ctx_bytes"] == device.ctx_bytes
    assert printed["peak_bytes"] == device.peak_bytes
    assert printed["live_buffers"] == device.live_buffers
    assert printed["oom_count"] == device.oom_count
    assert device.uuid is not None and printed["uuid"] == f"GPU-{uuid.UUID(bytes=device.uuid)}"


def test_the_monitor_exports_what_libvgpu_wrote(holding_container: tuple[Exporter, container.Allocation]) -> None:
    exporter, alloc = holding_container
    metrics = exporter.scrape()
    labels = {"namespace": "ns", "pod": "pod", "container": "main", "UUID": GPUS[0].uuid}
    assert value(metrics, "vgpu_container_memory_quota_bytes", **labels) == QUOTA_UNITS * 100 * MIB
    assert value(metrics, "vgpu_container_memory_used_bytes", **labels) == USED
    assert value(metrics, "vgpu_container_memory_context_bytes", **labels) == CONTEXT
    assert value(metrics, "vgpu_container_memory_peak_bytes", **labels) == PEAK
    assert value(metrics, "vgpu_container_oom_refusals_total", **labels) == REFUSED
    assert alloc.alloc_id == ids.alloc_id(exporter.pod_resources.holders[0][4])


@pytest.mark.parametrize(
    "memory_limit", ["0:3000MiB", "3GiB", "2500", "1500MiB", "0:2GiB,1:1000MiB", "3Gi", "0: 3 gib"]
)
def test_the_monitor_reads_a_quota_file_as_libvgpu_does(libvgpu: Path, short_tmp: Path, memory_limit: str) -> None:
    """One quota per container: cgpu-monitor takes it from the quota file (quota_file.quota_bytes),
    in every form libvgpu accepts; the limit libvgpu itself enforces from that file is the same."""
    folder = short_tmp / "region"
    folder.mkdir()
    quota = short_tmp / "quota.conf"
    quota.write_text(f"# by hand\nmemory_limit = {memory_limit}  # a comment\ngpu_virtual_memory=1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VGPU_", "LD_", "CUDA_"))}
    env.update(
        NVIDIA_VISIBLE_DEVICES=GPUS[0].uuid,
        CUDA_VISIBLE_DEVICES="0",
        VGPU_CONFIG_FILE=str(quota),
        VGPU_REGION_DIR=str(folder),
        LD_LIBRARY_PATH=str(libvgpu),
        VGPU_REAL_LIBCUDA=str(libvgpu / "fake" / "libcuda.so.1"),
        VGPU_REAL_LIBNVML=str(libvgpu / "fake" / "libnvidia-ml.so.1"),
        FAKE_DRIVER=str(libvgpu / "fake" / "libcuda.so.1"),
    )
    client = [str(libvgpu / "vgpu-test-client"), "init", "alloc:100"]
    done = subprocess.run(client, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout.splitlines()[:2] == ["init rc=0", "alloc 100 v2 rc=0"], done.stdout + done.stderr
    sample = region.read(folder / "vgpu.region")
    assert sample is not None
    assert quota_file.quota_bytes(quota.read_text()) == sample.devices[0].limit_bytes
