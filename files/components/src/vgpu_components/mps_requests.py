"""nvidia-mps's protocol with the device plugin and the DRA driver (this module is its one home): one
MPS control daemon per GPU allocation, its compute share and memory limit set on the daemon, where
the container cannot change them (docs/architecture.md, "Decision: an MPS server per allocation").
nvidia-mps's supervisor of the daemons is mps_supervisor.py, the process mps.py.


  request  <state_dir>/mps/<alloc-id>.json, written by the allocating side with the allocation's
           host paths (host_paths.HostPaths) and removed with them: the GPU, the thread
           percentage (the container's compute share, or device_plugin.mps_active_thread_percentage),
           the pinned device-memory limit in MiB (the quota; null where the driver lacks it) and a
           serial that changes on every write.
  daemon   `nvidia-cuda-mps-control -f` with CUDA_MPS_PIPE_DIRECTORY=<pipe_dir>/<alloc-id>,
           CUDA_MPS_LOG_DIRECTORY=<log_dir>/<alloc-id> and CUDA_VISIBLE_DEVICES=<the GPU's UUID>,
           then through its control pipe `set_default_active_thread_percentage <p>` and
           `set_default_device_pinned_mem_limit 0 <N>M`: the defaults every MPS server it starts
           gets, whatever the client's environment asks (measured on the H200: a client asking 100 %
           of a daemon at 25 % ran at 0.35 of the GPU alone; a client asking an 8192 MiB pinned
           limit of a daemon at 2048 MiB was refused 3072 MiB).
  ready    <pipe_dir>/<alloc-id>/.ready holding the request's serial once the daemon answers with
           those defaults; the allocating side waits for it (wait_ready) before it answers kubelet,
           so the container never starts before its daemon (a CUDA client that finds no daemon
           runs without MPS, unlimited).
  stop     when the request is gone (the allocation's pod gone: the device plugin collects it,
           the DRA driver unprepares it) the daemon gets `quit` and its folders are removed. A
           request written again (the same units given to a new container) with other settings
           restarts the daemon; with the same settings it is only marked ready for the new serial.
  restart  nvidia-mps keeps no state of its own: started again (a crash, an upgrade, a reboot) it
           starts a daemon for every request it finds. Clients connected to a daemon that stops
           lose their MPS server, as with any MPS daemon restart.

The container gets only <pipe_dir>/<alloc-id>, read-only, at <pipe_dir>, and
CUDA_MPS_PIPE_DIRECTORY (container.container_contract): it can reach no other allocation's daemon,
and no variable it sets raises what its daemon allows. `<pipe_dir>/.ready` exists while nvidia-mps
runs (the device plugin advertises compute shares only then).

The GPUs stay in Default compute mode: EXCLUSIVE_PROCESS lets one process, one MPS server, hold a
GPU, and here every allocation has its own server (mps.set_exclusive_process is refused).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import time
from dataclasses import dataclass, replace
from pathlib import Path

from vgpu_components import contract, ids, layout

log = logging.getLogger("vgpu.mps")
READY_FILE = ".ready"
VERSION = 1


class MpsNotReady(RuntimeError):
    """The daemon of an allocation did not become ready in time; the message says which and why."""


@dataclass(frozen=True)
class MpsRequest:
    """What the daemon of one allocation must enforce."""

    alloc_id: str
    gpu: str  # UUID
    thread_percentage: int
    pinned_mib: int | None  # None: the driver has no pinned limit (CUDA 11.4), or it is off
    serial: str = ""

    def settings(self) -> tuple[str, int, int | None]:
        return self.gpu, self.thread_percentage, self.pinned_mib

    def dumps(self) -> str:
        return json.dumps({"version": VERSION, **self.__dict__}, sort_keys=True)

    @classmethod
    def loads(cls, text: str, where: str) -> MpsRequest:
        """A request file's content; ValueError naming the file and the bad value."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not JSON ({exc})") from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"{where}: expected a version {VERSION} MPS request, got {str(doc)[:80]}")
        alloc_id, gpu, pct, pinned = (doc.get(k) for k in ("alloc_id", "gpu", "thread_percentage", "pinned_mib"))
        if not isinstance(alloc_id, str) or not ids.is_alloc_id(alloc_id):
            raise ValueError(f"{where}: alloc_id {alloc_id!r} is not an alloc-id")
        if not isinstance(gpu, str) or not gpu.startswith("GPU-"):
            raise ValueError(f"{where}: gpu {gpu!r} is not a GPU UUID")
        if isinstance(pct, bool) or not isinstance(pct, int) or not 1 <= pct <= contract.MAX_SHARE:
            raise ValueError(f"{where}: thread_percentage {pct!r} is not 1-{contract.MAX_SHARE}")
        if pinned is not None and (isinstance(pinned, bool) or not isinstance(pinned, int) or pinned <= 0):
            raise ValueError(f"{where}: pinned_mib {pinned!r} is not a positive number of MiB or null")
        return cls(alloc_id, gpu, pct, pinned, str(doc.get("serial", "")))


def new_serial() -> str:
    return secrets.token_hex(8)


def requests_dir(state_dir: str | os.PathLike[str]) -> Path:
    return layout.mps_requests(state_dir)


def write_request(state_dir: str | os.PathLike[str], request: MpsRequest) -> None:
    """Write (or replace) an allocation's request, whole or not at all."""
    folder = requests_dir(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o755)
    path = layout.mps_request_path(state_dir, request.alloc_id)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(request.dumps(), encoding="utf-8")
    tmp.chmod(0o644)
    tmp.replace(path)


def read_request(state_dir: str | os.PathLike[str], alloc_id: str) -> MpsRequest | None:
    path = layout.mps_request_path(state_dir, alloc_id)
    try:
        return MpsRequest.loads(path.read_text(encoding="utf-8"), str(path))
    except FileNotFoundError:
        return None


def remove_request(state_dir: str | os.PathLike[str], alloc_id: str) -> None:
    layout.mps_request_path(state_dir, alloc_id).unlink(missing_ok=True)


def pipe_folder(pipe_dir: str | os.PathLike[str], alloc_id: str) -> Path:
    """The pipe folder of one allocation's daemon (mounted read-only into its container)."""
    return Path(pipe_dir) / alloc_id


def wait_ready(pipe_dir: str | os.PathLike[str], request: MpsRequest, timeout_s: float) -> None:
    """Block until nvidia-mps says the allocation's daemon enforces this request (its ready file
    holds the request's serial); MpsNotReady after timeout_s."""
    ready = pipe_folder(pipe_dir, request.alloc_id) / READY_FILE
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if ready.read_text(encoding="utf-8").strip() == request.serial:
                return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            raise MpsNotReady(
                f"the MPS daemon of allocation {request.alloc_id} (GPU {request.gpu}, "
                f"{request.thread_percentage} % of its SMs) was not ready within {timeout_s:g} s: is nvidia-mps "
                f"running on this node (its pipe folder {pipe_dir}/.ready)? Its log: the nvidia-mps pod's"
            )
        time.sleep(0.05)


def replace_share(request: MpsRequest, thread_percentage: int) -> MpsRequest:
    """The request with another thread percentage and a new serial."""
    return replace(request, thread_percentage=thread_percentage, serial=new_serial())
