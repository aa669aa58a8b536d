"""nvidia-mps's supervisor: a daemon per request of the protocol (mps_requests.py), started with the
request's share and pinned limit as its defaults, probed, restarted when it exits or its defaults
drift, quit when its request goes; at each probe every running server's own share and pinned limit
checked, and one changed set back and shut down (logged, counted: a root container can reach the
control socket, docs/security.md); the GPUs' compute modes checked (Default, never changed)."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from vgpu_components import component, nvml
from vgpu_components.mps_requests import READY_FILE, MpsRequest, pipe_folder, requests_dir

log = logging.getLogger("vgpu.mps")


_LIMIT = re.compile(r"^\s*(\d+)(?:\.(\d+))?\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)
_MIB_PER = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}


def limit_range(text: str) -> tuple[float, float] | None:
    """The pinned memory limits, in MiB, that the control daemon's answer stands for: [low, high).
    It prints a limit truncated to its last digit in its largest unit (driver 580 answers 3000M
    as "2G", seen on the H200), so "2G" is any limit from 2048 up to 3072 MiB. None when the last
    line of the answer is not a limit."""
    lines = text.strip().splitlines()
    match = _LIMIT.match(lines[-1]) if lines else None
    if match is None:
        return None
    whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3).upper()
    low = float(f"{whole}.{fraction or 0}")
    return low * _MIB_PER[unit], (low + 10.0 ** -len(fraction)) * _MIB_PER[unit]


def limit_differs(output: str, mib: int) -> bool | None:
    """Whether the daemon's answer shows a limit other than `mib`; None when it is not read here."""
    found = limit_range(output)
    return None if found is None else not found[0] <= mib < found[1]


class Daemon:
    """One allocation's MPS control daemon, run in the foreground and driven through its pipe."""

    def __init__(self, request: MpsRequest, pipe_dir: Path, log_dir: Path, section: dict[str, Any]) -> None:
        self.request = request
        self.pipe = pipe_folder(pipe_dir, request.alloc_id)
        self.log_dir = log_dir / request.alloc_id
        self.binary = str(section["control_binary"])
        self.probe_timeout = float(section["probe_timeout_s"])
        self.start_timeout = float(section["start_timeout_s"])
        self.process: subprocess.Popen[bytes] | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.next_probe = 0.0
        self.warned_limit = False  # said once that the daemon's pinned limit answer is not read

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CUDA_MPS_PIPE_DIRECTORY=str(self.pipe),
            CUDA_MPS_LOG_DIRECTORY=str(self.log_dir),
            CUDA_VISIBLE_DEVICES=self.request.gpu,  # the daemon, its servers and device 0: this GPU only
        )
        return env

    def control(self, command: str) -> tuple[bool, str]:
        """One command through the control pipe; (ok, output)."""
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
        """Whether the daemon answers with the request's thread percentage and pinned limit as its
        defaults (what every new server starts with)."""
        ok, output = self.control("get_default_active_thread_percentage")
        try:
            found = float(output.split()[-1]) if ok else None
        except (ValueError, IndexError):
            found = None
        if found is None:
            return False, f"control pipe probe failed: {output or 'no answer'}"
        if round(found) != self.request.thread_percentage:
            return False, f"default active thread percentage is {found:g}, not {self.request.thread_percentage}"
        if self.request.pinned_mib is not None:
            ok, output = self.control("get_default_device_pinned_mem_limit 0")
            differs = limit_differs(output, self.request.pinned_mib) if ok else None
            if differs is None:
                self._unreadable_limit(output)  # a format not read here: never a reason to restart
            elif differs:
                return False, f"default pinned memory limit is {output.strip()}, not {self.request.pinned_mib} MiB"
        return True, "ok"

    def set_limits_again(self, servers: list[int]) -> None:
        """The answer is no finer than its unit (3000 and 3050 MiB are both "2G"), so a limit raised
        within it is never seen: the request's pinned limit is set again on the defaults and on every
        running server at each probe, and such a change lasts one probe at most."""
        if self.request.pinned_mib is None:
            return
        self.control(f"set_default_device_pinned_mem_limit 0 {self.request.pinned_mib}M")
        for pid in servers:
            self.control(f"set_device_pinned_mem_limit {pid} 0 {self.request.pinned_mib}M")

    def servers(self) -> list[int]:
        """The PIDs of the daemon's running servers (get_server_list); [] when it cannot say."""
        ok, output = self.control("get_server_list")
        return [int(word) for word in output.split() if word.isdigit()] if ok else []

    def drift(self, pid: int) -> list[str]:
        """What of server `pid`'s own share and pinned limit is not the request's, in words."""
        found: list[str] = []
        ok, output = self.control(f"get_active_thread_percentage {pid}")
        try:
            percentage = float(output.split()[-1]) if ok else None
        except (ValueError, IndexError):
            percentage = None
        if percentage is not None and round(percentage) != self.request.thread_percentage:
            found.append(f"active thread percentage {percentage:g}, not {self.request.thread_percentage}")
        if self.request.pinned_mib is not None:
            ok, output = self.control(f"get_device_pinned_mem_limit {pid} 0")
            differs = limit_differs(output, self.request.pinned_mib) if ok else None
            if differs is None:
                self._unreadable_limit(output)
            elif differs:
                found.append(f"pinned memory limit {output.strip()}, not {self.request.pinned_mib} MiB")
        return found

    def _unreadable_limit(self, output: str) -> None:
        if not self.warned_limit:
            self.warned_limit = True
            log.warning(
                "MPS daemon of allocation %s answers a pinned memory limit as %r, which is not read here: "
                "its limits are not verified",
                self.request.alloc_id,
                output,
            )

    def verify_servers(self) -> dict[int, list[str]]:
        """Issue 40: a container that can connect to the control socket as root can change its
        running server's share and pinned limit. Every running server whose own settings are not
        the request's gets them set back, and is then shut down (forced): the clients it took
        while they were changed keep what they got. Returns what was found, per server PID."""
        found = {}
        servers = self.servers()
        for pid in servers:
            drift = self.drift(pid)
            if not drift:
                continue
            found[pid] = drift
            self.control(f"set_active_thread_percentage {pid} {self.request.thread_percentage}")
            if self.request.pinned_mib is not None:
                self.control(f"set_device_pinned_mem_limit {pid} 0 {self.request.pinned_mib}M")
            self.control(f"shutdown_server {pid} -f")
        self.set_limits_again([pid for pid in servers if pid not in found])
        return found

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the daemon, set its defaults and mark it ready; RuntimeError saying why it could not."""
        self.pipe.mkdir(parents=True, exist_ok=True)
        self.pipe.chmod(0o755)
        for leftover in self.pipe.iterdir():  # a dead daemon's sockets; the folder stays (it is mounted)
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
            else:
                leftover.unlink(missing_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen([self.binary, "-f"], env=self.env, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout
        ok, output = self.control("get_default_active_thread_percentage")
        while not ok and self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
            ok, output = self.control("get_default_active_thread_percentage")
        if not ok:
            self.stop(remove=False)
            raise RuntimeError(f"the control daemon did not answer within {self.start_timeout:g} s: {output}")
        commands = [f"set_default_active_thread_percentage {self.request.thread_percentage}"]
        if self.request.pinned_mib is not None:
            commands.append(f"set_default_device_pinned_mem_limit 0 {self.request.pinned_mib}M")
        for command in commands:
            ok, output = self.control(command)
            if not ok:
                self.stop(remove=False)
                raise RuntimeError(f"{command}: {output or 'failed'}")
        ok, why = self.probe()
        if not ok:
            self.stop(remove=False)
            raise RuntimeError(why)
        self.mark_ready(self.request.serial)
        log.info(
            "MPS daemon of allocation %s ready: %d %% of GPU %s%s",
            self.request.alloc_id,
            self.request.thread_percentage,
            self.request.gpu,
            f", pinned memory {self.request.pinned_mib} MiB" if self.request.pinned_mib is not None else "",
            extra={"pid": self.process.pid, "alloc_id": self.request.alloc_id},
        )

    def mark_ready(self, serial: str) -> None:
        ready = self.pipe / READY_FILE
        tmp = self.pipe / f".{READY_FILE}.tmp"
        tmp.write_text(serial, encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(ready)

    def stop(self, remove: bool = True, timeout: float = 10.0) -> None:
        """quit, then terminate; with `remove` also its pipe and log folders (the allocation is gone)."""
        (self.pipe / READY_FILE).unlink(missing_ok=True)
        process = self.process
        if process is not None and process.poll() is None:
            self.control("quit")
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("MPS daemon of allocation %s ignored quit; terminating it", self.request.alloc_id)
                component.terminate(process, 5)
        if remove:
            shutil.rmtree(self.pipe, ignore_errors=True)
            shutil.rmtree(self.log_dir, ignore_errors=True)


class MpsManager:
    """Keeps one running daemon per request: starts, restarts (with back-off) and stops them."""

    def __init__(
        self, cfg: dict[str, Any], backend: nvml.GpuBackend | None = None, stopping: threading.Event | None = None
    ) -> None:
        self.section = cfg["mps"]
        self.state_dir = cfg["state_dir"]
        self.pipe_dir = Path(self.section["pipe_dir"])
        self.log_dir = Path(self.section["log_dir"])
        self.tick = min(0.2, float(self.section["probe_interval_s"]))
        self.probe_interval = float(self.section["probe_interval_s"])
        self.backoff = float(self.section["restart_backoff_s"])
        self.backend = backend
        self.daemons: dict[str, Daemon] = {}
        self.restarts = 0
        self.probes = 0  # probes of running daemons, in all
        self.tampered = 0  # servers found with a share or pinned limit not their request's, put right
        self.problems: dict[str, str] = {}  # alloc-id, GPU or "node" -> what is wrong
        self.unreadable: dict[str, str] = {}  # request file -> why it cannot be used
        self.stopping = stopping or threading.Event()  # run() returns once it is set

    def start(self) -> None:
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.pipe_dir.chmod(0o755)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._check_compute_modes()
        (self.pipe_dir / READY_FILE).touch()

    def _check_compute_modes(self) -> None:
        """Every GPU must be in Default compute mode: several MPS servers share a GPU only there."""
        if self.backend is None:
            return
        for gpu in self.backend.gpus():
            try:
                mode = self.backend.compute_mode(gpu.uuid)
            except Exception as exc:
                log.warning("cannot read the compute mode of %s: %s", gpu.uuid, exc)
                continue
            if mode != nvml.COMPUTE_MODE_DEFAULT:
                self.problems[f"gpu {gpu.uuid}"] = (
                    f"GPU {gpu.uuid} is in compute mode {mode}, not Default (0): a server per allocation needs "
                    f"Default (nvidia-smi -i {gpu.uuid} -c DEFAULT)"
                )
                log.error("%s", self.problems[f"gpu {gpu.uuid}"])

    def requests(self) -> dict[str, MpsRequest]:
        """The requests on the host; those it cannot read go to unreadable (and /healthz)."""
        folder = requests_dir(self.state_dir)
        found: dict[str, MpsRequest] = {}
        self.unreadable = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                request = MpsRequest.loads(path.read_text(encoding="utf-8"), str(path))
            except (OSError, ValueError) as exc:
                self.unreadable[path.name] = str(exc)
                continue
            if request.alloc_id != path.stem:
                self.unreadable[path.name] = f"{path}: names allocation {request.alloc_id}"
                continue
            found[request.alloc_id] = request
        return found

    def reconcile(self, now: float | None = None) -> None:
        """One pass: stop the daemons of requests that are gone, start or restart the others."""
        now = time.monotonic() if now is None else now
        wanted = self.requests()
        for alloc_id in [a for a in self.daemons if a not in wanted]:
            log.info("allocation %s is gone: stopping its MPS daemon", alloc_id)
            self.daemons.pop(alloc_id).stop()
            self.problems.pop(alloc_id, None)
        for alloc_id, request in wanted.items():
            daemon = self.daemons.get(alloc_id)
            if daemon is not None and daemon.request.settings() != request.settings():
                log.info("allocation %s has new MPS settings: restarting its daemon", alloc_id)
                daemon.stop(remove=False)
                daemon = None
            if daemon is None:
                daemon = self.daemons[alloc_id] = Daemon(request, self.pipe_dir, self.log_dir, self.section)
                self._start(daemon, now)
            elif not daemon.running():
                if now >= daemon.retry_at:
                    if daemon.process is not None:
                        self.restarts += 1
                        log.error("MPS daemon of allocation %s exited; restarting it", alloc_id)
                    self._start(daemon, now)
            elif daemon.request.serial != request.serial:
                daemon.request = request
                daemon.mark_ready(request.serial)
            elif now >= daemon.next_probe:
                ok, why = daemon.probe()
                daemon.next_probe = now + self.probe_interval
                if not ok:
                    log.error("MPS daemon of allocation %s: %s; restarting it", alloc_id, why)
                    daemon.stop(remove=False)
                    self.restarts += 1
                    self._start(daemon, now)
                else:
                    self._verify_servers(daemon)
                self.probes += 1

    def _verify_servers(self, daemon: Daemon) -> None:
        for pid, drift in daemon.verify_servers().items():
            self.tampered += 1
            log.error(
                "MPS server %d of allocation %s had its %s (changed through the control socket, which a root "
                "container can reach): set back and the server shut down",
                pid,
                daemon.request.alloc_id,
                "; ".join(drift),
                extra={"alloc_id": daemon.request.alloc_id, "server_pid": pid, "tampered_total": self.tampered},
            )

    def _start(self, daemon: Daemon, now: float) -> None:
        try:
            daemon.start()
        except (OSError, RuntimeError) as exc:
            daemon.failures += 1
            daemon.retry_at = now + self.backoff * min(2 ** (daemon.failures - 1), 30)
            self.problems[daemon.request.alloc_id] = f"allocation {daemon.request.alloc_id}: {exc}"
            log.error("MPS daemon of allocation %s did not start: %s", daemon.request.alloc_id, exc)
            return
        daemon.failures = 0
        daemon.next_probe = now + self.probe_interval
        self.problems.pop(daemon.request.alloc_id, None)

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.reconcile()
            except OSError as exc:
                self.problems["node"] = f"cannot read the MPS requests: {exc}"
                log.error("%s", self.problems["node"])
            else:
                self.problems.pop("node", None)
            self.stopping.wait(self.tick)

    def healthy(self) -> tuple[bool, str]:
        problems = {**self.problems, **self.unreadable}
        if not problems:
            if self.tampered:
                return True, f"ok ({self.tampered} MPS server setting change(s) put right since start: see the log)"
            return True, "ok"
        return False, "; ".join(sorted(problems.values()))

    def stop(self) -> None:
        """Quit every daemon; their requests stay, for the next start."""
        self.stopping.set()
        (self.pipe_dir / READY_FILE).unlink(missing_ok=True)
        for daemon in self.daemons.values():
            daemon.stop(remove=False)
        self.daemons.clear()
