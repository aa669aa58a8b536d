"""nvidia-mps: supervises the MPS control daemon (`nvidia-cuda-mps-control -f`) in the foreground.

Pipe and log folders under /run/nvidia/mps (config mps.pipe_dir, mps.log_dir); health through
the control pipe (`get_default_active_thread_percentage`); restart with back-off when the daemon
dies; `quit` on SIGTERM. Setting the GPUs to EXCLUSIVE_PROCESS is a config option
(mps.set_exclusive_process, off by default); when on, the original compute modes are saved in
the pipe folder and restored on exit, also after a crash of this supervisor.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from vgpu_components import __version__, config, health, nvml

log = logging.getLogger("vgpu.mps")
READY_FILE = ".ready"
MODES_FILE = ".compute-modes.json"


class MpsSupervisor:
    def __init__(self, cfg: dict[str, Any], backend: nvml.GpuBackend | None = None) -> None:
        section = cfg["mps"]
        self.pipe_dir = Path(section["pipe_dir"])
        self.log_dir = Path(section["log_dir"])
        self.binary = str(section["control_binary"])
        self.exclusive = bool(section["set_exclusive_process"])
        self.probe_interval = float(section["probe_interval_s"])
        self.probe_timeout = float(section["probe_timeout_s"])
        self.backoff = float(section["restart_backoff_s"])
        self.backend = backend
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.healthy_state = (False, "starting")
        self.stopping = threading.Event()

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["CUDA_MPS_PIPE_DIRECTORY"] = str(self.pipe_dir)
        env["CUDA_MPS_LOG_DIRECTORY"] = str(self.log_dir)
        return env

    # --- compute mode ------------------------------------------------------------------------------
    def _set_exclusive(self) -> None:
        if not self.exclusive or self.backend is None:
            return
        saved = self.pipe_dir / MODES_FILE
        # After a crash the saved file holds the modes from before we changed them: keep those.
        modes: dict[str, int] = json.loads(saved.read_text()) if saved.exists() else {}
        for gpu in self.backend.gpus():
            modes.setdefault(gpu.uuid, self.backend.compute_mode(gpu.uuid))
        saved.write_text(json.dumps(modes))
        for uuid in modes:
            self.backend.set_compute_mode(uuid, nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS)
            log.info("GPU %s set to EXCLUSIVE_PROCESS", uuid)

    def _restore_modes(self) -> None:
        saved = self.pipe_dir / MODES_FILE
        if self.backend is None or not saved.exists():
            return
        for uuid, mode in json.loads(saved.read_text()).items():
            try:
                self.backend.set_compute_mode(uuid, int(mode))
                log.info("GPU %s compute mode restored to %d", uuid, mode)
            except Exception as exc:
                log.error("could not restore compute mode of %s: %s", uuid, exc)
                return  # keep the file so the next start can try again
        saved.unlink()

    # --- the daemon ----------------------------------------------------------------------------------
    def _spawn(self) -> None:
        self.process = subprocess.Popen([self.binary, "-f"], env=self.env, stdin=subprocess.DEVNULL)
        log.info("started %s -f", self.binary, extra={"pid": self.process.pid, "restarts": self.restarts})

    def control(self, command: str) -> tuple[bool, str]:
        """Send one command through the control pipe; (ok, output)."""
        try:
            result = subprocess.run(
                [self.binary],
                input=(command + "\n").encode(),
                env=self.env,
                capture_output=True,
                timeout=self.probe_timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{command}: {exc}"
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        return result.returncode == 0, output

    def probe(self) -> tuple[bool, str]:
        ok, output = self.control("get_default_active_thread_percentage")
        if ok:
            try:
                float(output.split()[-1])
            except (ValueError, IndexError):
                ok = False
        return ok, output

    def start(self) -> None:
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.pipe_dir.chmod(0o755)
        self._set_exclusive()
        self._spawn()

    def run(self) -> None:
        """Watch the daemon until stop(): probe it, restart it when it exits."""
        next_probe = time.monotonic()
        while not self.stopping.is_set():
            assert self.process is not None
            code = self.process.poll()
            if code is not None:
                self._mark(False, f"daemon exited with status {code}")
                log.error("MPS control daemon exited with status %s; restarting in %.1f s", code, self.backoff)
                if self.stopping.wait(self.backoff):
                    break
                self.restarts += 1
                self._spawn()
                next_probe = time.monotonic() + 0.2
                continue
            if time.monotonic() >= next_probe:
                ok, output = self.probe()
                self._mark(ok, "ok" if ok else f"control pipe probe failed: {output}")
                next_probe = time.monotonic() + (self.probe_interval if ok else min(1.0, self.probe_interval))
            self.stopping.wait(0.1)

    def _mark(self, ok: bool, reason: str) -> None:
        if ok != self.healthy_state[0]:
            (log.info if ok else log.warning)("MPS %s", "healthy" if ok else f"unhealthy: {reason}")
        self.healthy_state = (ok, reason)
        ready = self.pipe_dir / READY_FILE
        if ok:
            ready.touch()
        else:
            ready.unlink(missing_ok=True)

    def healthy(self) -> tuple[bool, str]:
        return self.healthy_state

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        (self.pipe_dir / READY_FILE).unlink(missing_ok=True)
        process = self.process
        if process is not None and process.poll() is None:
            ok, output = self.control("quit")
            log.info("sent quit to the MPS control daemon: %s", output or ("ok" if ok else "failed"))
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("MPS control daemon ignored quit; terminating it")
                process.terminate()
                try:
                    process.wait(5)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self._restore_modes()


DESCRIPTION = (
    "Supervises nvidia-cuda-mps-control in the foreground: pipe and log folders, health "
    "through the control pipe, restart on crash, compute mode restored on exit (config: the mps section)."
)


def main(argv: list[str] | None = None) -> int:
    started = config.start("nvidia-mps", DESCRIPTION, __version__, argv)
    if started is None:
        return 2
    _args, cfg = started
    binary = cfg["mps"]["control_binary"]
    if shutil.which(binary) is None:
        log.error("%s not found on PATH (%s)", binary, os.environ.get("PATH", ""))
        return 2
    backend: nvml.GpuBackend | None = None
    if cfg["mps"]["set_exclusive_process"]:
        backend = nvml.NvmlBackend()
    supervisor = MpsSupervisor(cfg, backend)
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: supervisor.stopping.set())
    server = health.HealthServer("", cfg["mps"]["healthz_port"], {"/healthz": health.check(supervisor.healthy)})
    server.start()
    supervisor.start()
    supervisor.run()
    log.info("stopping")
    supervisor.stop()
    server.stop()
    if backend is not None:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
