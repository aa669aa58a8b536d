"""The MPS supervisor with a stand-in nvidia-cuda-mps-control (no GPU or driver on the CI machine;
files/components/tests/gpu_smoke.sh runs the real daemon on the GPU host).

The stand-in behaves like the real tool where the supervisor depends on it: `-f` runs the
control daemon in the foreground until told to quit; without arguments it sends the command on
stdin to the daemon through the pipe folder and fails when no daemon is there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FakeGpus, two_gpus
from vgpu_components import config, health, mps, nvml

FAKE_CONTROL = textwrap.dedent(
    """\
    import os, sys, time
    pipe = os.environ["CUDA_MPS_PIPE_DIRECTORY"]
    log = os.environ["CUDA_MPS_LOG_DIRECTORY"]
    pidfile = os.path.join(pipe, "fake-daemon.pid")
    if sys.argv[1:] == ["-f"]:
        with open(pidfile, "w") as f:
            f.write(str(os.getpid()))
        with open(os.path.join(log, "control.log"), "a") as f:
            f.write("started\\n")
        while not os.path.exists(os.path.join(pipe, "quit")):
            time.sleep(0.02)
        os.remove(os.path.join(pipe, "quit"))
        os.remove(pidfile)
        sys.exit(0)
    command = sys.stdin.read().strip()
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, 0)
    except (OSError, ValueError):
        print("Cannot find MPS control daemon process", file=sys.stderr)
        sys.exit(1)
    if command == "quit":
        open(os.path.join(pipe, "quit"), "w").close()
    elif command == "get_default_active_thread_percentage":
        print("100.0")
    else:
        sys.exit(1)
    """
)


@pytest.fixture
def fake_binary(tmp_path: Path) -> str:
    script = tmp_path / "fake_mps_control.py"
    script.write_text(FAKE_CONTROL)
    wrapper = tmp_path / "nvidia-cuda-mps-control"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def make_cfg(root: Path, binary: str, exclusive: bool = False) -> dict:
    cfg = config.load(None, environ={})
    cfg["mps"].update(
        pipe_dir=str(root / "mps"),
        log_dir=str(root / "mps" / "log"),
        control_binary=binary,
        set_exclusive_process=exclusive,
        probe_interval_s=0.2,
        restart_backoff_s=0.2,
    )
    return cfg


class Running:
    def __init__(self, cfg: dict, backend: nvml.GpuBackend | None = None) -> None:
        self.supervisor = mps.MpsSupervisor(cfg, backend)
        self.supervisor.start()
        self.thread = threading.Thread(target=self.supervisor.run, daemon=True)
        self.thread.start()

    def wait_healthy(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.supervisor.healthy()[0] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.supervisor.healthy()[0], self.supervisor.healthy()

    def stop(self) -> None:
        self.supervisor.stopping.set()
        self.thread.join(5)
        self.supervisor.stop()


@pytest.fixture
def running(tmp_path: Path, fake_binary: str) -> Iterator[Running]:
    r = Running(make_cfg(tmp_path, fake_binary))
    yield r
    r.stop()


def test_starts_the_daemon_with_pipe_and_log_folders_and_reports_health(running: Running, tmp_path: Path) -> None:
    running.wait_healthy()
    assert (tmp_path / "mps" / ".ready").exists()
    assert (tmp_path / "mps" / "log" / "control.log").read_text().startswith("started")
    server = health.HealthServer("127.0.0.1", 0, {"/healthz": health.check(running.supervisor.healthy)}).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/healthz"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
    finally:
        server.stop()


def test_restarts_a_crashed_daemon(running: Running, tmp_path: Path) -> None:
    running.wait_healthy()
    process = running.supervisor.process
    assert process is not None
    first = process.pid
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (running.supervisor.restarts == 0 or not running.supervisor.healthy()[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running.supervisor.restarts == 1
    assert running.supervisor.process is not None and running.supervisor.process.pid != first
    running.wait_healthy()


def test_stop_sends_quit_and_the_daemon_exits(tmp_path: Path, fake_binary: str) -> None:
    r = Running(make_cfg(tmp_path, fake_binary))
    r.wait_healthy()
    process = r.supervisor.process
    r.stop()
    assert process is not None and process.returncode == 0  # exited on quit, not killed
    assert not (tmp_path / "mps" / ".ready").exists()


def test_compute_mode_is_left_alone_by_default(tmp_path: Path, fake_binary: str) -> None:
    gpus = FakeGpus(two_gpus())
    r = Running(make_cfg(tmp_path, fake_binary), gpus)
    r.wait_healthy()
    assert set(gpus.modes.values()) == {nvml.COMPUTE_MODE_DEFAULT}
    r.stop()


def test_exclusive_process_when_asked_and_restored_on_exit(tmp_path: Path, fake_binary: str) -> None:
    gpus = FakeGpus(two_gpus())
    gpus.modes[two_gpus()[1].uuid] = 2  # prohibited before we start: must come back as 2
    r = Running(make_cfg(tmp_path, fake_binary, exclusive=True), gpus)
    r.wait_healthy()
    assert set(gpus.modes.values()) == {nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS}
    r.stop()
    assert gpus.modes == {two_gpus()[0].uuid: 0, two_gpus()[1].uuid: 2}
    assert not (tmp_path / "mps" / ".compute-modes.json").exists()


def test_sigterm_stops_the_cli_gracefully(tmp_path: Path, fake_binary: str) -> None:
    """The real entry point as a process: SIGTERM -> quit to the daemon -> exit 0."""
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(Path(mps.__file__).resolve().parents[1]),
        VGPU_MPS_PIPE_DIR=str(tmp_path / "mps"),
        VGPU_MPS_LOG_DIR=str(tmp_path / "mps" / "log"),
        VGPU_MPS_CONTROL_BINARY=fake_binary,
        VGPU_MPS_HEALTHZ_PORT="0",
        VGPU_MPS_PROBE_INTERVAL_S="0.2",
        VGPU_LOG_FORMAT="json",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpu_components.mps", "--config", str(tmp_path / "none.yaml")],
        env=env,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 15
    while not (tmp_path / "mps" / ".ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "mps" / ".ready").exists()
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=20)[1]
    assert proc.returncode == 0, err.decode()
    assert b'"msg": "sent quit to the MPS control daemon' in err
    assert not (tmp_path / "mps" / "fake-daemon.pid").exists()
