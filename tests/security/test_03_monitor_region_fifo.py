"""Finding 3: a FIFO named `vgpu.region` in one container's region folder hung every /metrics
scrape, leaked a thread per scrape, and /healthz stayed 200, so the node's metrics went missing
silently.

cgpu-monitor must read only regular files (no FIFO, device, folder or symlink), answer every
scrape, and, when a scrape cannot complete for any reason, say so on /healthz and /metrics
without piling up threads. Real HTTP, a real PodResources server; NVML is the fake of the
component tests (no GPU here).
"""

from __future__ import annotations

import os
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import GPUS, Exporter
from vgpu_components import ids, region

from tests.polling import wait_for

KEY0 = ids.gpu_key(GPUS[0].uuid)
HONEST = [f"{KEY0}-{n}" for n in range(10)]
HOSTILE = [f"{KEY0}-{n}" for n in range(10, 20)]


@pytest.fixture
def exporter(short_tmp: Path) -> Iterator[Exporter]:
    e = Exporter(short_tmp)
    e.collector.scrape_timeout_s = 1.0
    e.pod_resources.holders = [
        ("ns", "honest", "main", "vgpu.io/gpu-memory", HONEST),
        ("ns", "hostile", "main", "vgpu.io/gpu-memory", HOSTILE),
    ]
    yield e
    e.stop()


def region_file(exporter: Exporter, device_ids: list[str]) -> Path:
    path = region.region_path(exporter.cfg["state_dir"], ids.alloc_id(device_ids))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def get(exporter: Exporter, path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}{path}", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def threads_settle(at_most: int, what: str) -> None:
    """Finished request threads exit just after replying: wait for the count to come down."""
    wait_for(what, lambda: threading.active_count() <= at_most, 3, 0.05, seen=threading.active_count)


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder", "symlink to /dev/zero", "symlink to a file"])
def test_a_non_regular_region_costs_that_container_its_sample_and_nothing_else(exporter: Exporter, kind: str) -> None:
    path = region_file(exporter, HOSTILE)
    elsewhere = path.parent.parent / "another-file"
    elsewhere.write_bytes(b"\0" * region.FILE_SIZE)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(path))
    elif kind == "folder":
        path.mkdir()
    elif kind == "symlink to /dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.symlink_to(elsewhere)
    get(exporter, "/metrics")  # the first scrape opens the PodResources channel (gRPC threads)
    threads = threading.active_count()
    for _scrape in range(4):
        # A scrape that opened the FIFO would block for good: the client's timeout shows it.
        status, text = get(exporter, "/metrics", timeout=30)
        assert status == 200
        assert 'pod="honest"' in text  # the other container is still reported
    assert 'vgpu_monitor_errors_total{source="region"} 5.0' in text
    threads_settle(threads, f"the scrape threads to end (at most {threads} threads)")
    assert get(exporter, "/healthz")[0] == 200


def test_a_scrape_that_cannot_complete_turns_healthz_unhealthy_without_leaking_threads(
    exporter: Exporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any read that never returns (here one forced to block) must show, not hide."""
    stuck = threading.Event()
    release = threading.Event()
    real_read = region.read

    def blocking_read(path: str | os.PathLike[str], attempts: int = 100) -> region.RegionSample | None:
        stuck.set()
        release.wait(120)
        return real_read(path, attempts)

    monkeypatch.setattr(region, "read", blocking_read)
    region_file(exporter, HOSTILE)
    first = threading.Thread(target=get, args=(exporter, "/metrics", 150), daemon=True)
    first.start()
    assert stuck.wait(5)
    threads = threading.active_count()
    try:
        for _scrape in range(10):
            # Answered while the first scrape is still stuck (it stays so until release, 120 s):
            # a scrape that waited for it would run into the client's timeout.
            status, text = get(exporter, "/metrics", timeout=30)
            assert status == 503 and "a scrape has been running for" in text, (status, text)
        status, text = get(exporter, "/healthz")
        assert status == 503 and "a scrape has been running for" in text
        threads_settle(threads, f"each stuck scrape's thread to end (at most {threads} threads)")
    finally:
        release.set()
        first.join(10)
    status, _text = get(exporter, "/metrics")
    assert status == 200
    assert get(exporter, "/healthz")[0] == 200
