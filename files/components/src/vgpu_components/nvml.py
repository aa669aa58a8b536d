"""The small GPU interface the components need, implemented on NVML (nvidia-ml-py, `import pynvml`).

Tests use a fake of this interface because the CI machine has no GPU; the H200 smoke script
(files/components/tests/gpu_smoke.sh) runs the real one.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

import pynvml

# Xids that come from applications, not from a failing GPU (same list NVIDIA's plugin skips):
# 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
# 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

COMPUTE_MODE_DEFAULT = 0
COMPUTE_MODE_EXCLUSIVE_PROCESS = 3


@dataclass(frozen=True)
class Gpu:
    """One physical GPU as NVML reports it."""

    uuid: str
    index: int
    total_mib: int
    name: str = ""


@dataclass(frozen=True)
class ProcessMemory:
    """GPU memory one host process really holds (NVML's per-process accounting)."""

    pid: int
    used_bytes: int


@dataclass(frozen=True)
class Memory:
    total_mib: int
    used_mib: int  # as NVML's first memory call reports it: with what the driver reserves
    reserved_mib: int = 0  # what the driver reserves for itself (NVML's memory call v2; 0 where it has none)


@dataclass(frozen=True)
class XidEvent:
    uuid: str
    xid: int


class GpuBackend(Protocol):
    def gpus(self) -> list[Gpu]: ...

    def memory(self, uuid: str) -> Memory: ...

    def processes(self, uuid: str) -> list[ProcessMemory]:
        """Every process with memory on the GPU (compute, MPS clients and graphics), by host PID."""

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        """Block up to timeout_ms for critical Xid events; [] on timeout or when unsupported."""

    def compute_mode(self, uuid: str) -> int: ...

    def cuda_driver_version(self) -> int:
        """The CUDA version the driver supports, as 1000 * major + 10 * minor (11040 = 11.4)."""

    def set_compute_mode(self, uuid: str, mode: int) -> None: ...

    def close(self) -> None: ...


class NvmlBackend:
    """GpuBackend on the real driver."""

    def __init__(self) -> None:
        self.nvml: Any = pynvml
        pynvml.nvmlInit()
        self._lock = threading.Lock()
        self._handles: dict[str, Any] = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            self._handles[_text(pynvml.nvmlDeviceGetUUID(handle))] = handle
        self._events: Any = None

    def gpus(self) -> list[Gpu]:
        out = []
        for uuid, handle in self._handles.items():
            mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(
                Gpu(
                    uuid=uuid,
                    index=int(self.nvml.nvmlDeviceGetIndex(handle)),
                    total_mib=int(mem.total) // (1024 * 1024),
                    name=_text(self.nvml.nvmlDeviceGetName(handle)),
                )
            )
        return sorted(out, key=lambda g: g.index)

    def memory(self, uuid: str) -> Memory:
        handle = self._handles[uuid]
        mib = 1024 * 1024
        try:  # v2 (R510 and later) tells the driver's reserve apart; its used leaves it out
            mem = self.nvml.nvmlDeviceGetMemoryInfo(handle, version=self.nvml.nvmlMemory_v2)
            reserved = int(mem.reserved)
            return Memory(int(mem.total) // mib, (int(mem.used) + reserved) // mib, reserved // mib)
        except (AttributeError, TypeError, self.nvml.NVMLError):
            mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
            return Memory(total_mib=int(mem.total) // mib, used_mib=int(mem.used) // mib)

    def processes(self, uuid: str) -> list[ProcessMemory]:
        handle = self._handles[uuid]
        seen: dict[int, int] = {}
        # Graphics too (issue 38): a Vulkan, OpenGL or EGL process is in that list only.
        for query in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetMPSComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            for entry in self._newest(query, handle):
                used = entry.usedGpuMemory  # None when the driver cannot tell (e.g. some vGPU guests)
                if used is not None:
                    seen[int(entry.pid)] = max(seen.get(int(entry.pid), 0), int(used))
        return [ProcessMemory(pid, used) for pid, used in sorted(seen.items())]

    def _newest(self, query: str, handle: Any) -> list[Any]:
        """The newest version of an NVML call the driver has: pynvml's unversioned name asks for _v3,
        which R470 lacks, and some drivers (vGPU guests, libvgpu's fake) have no MPS query at all."""
        for version in ("_v3", "_v2"):
            try:
                return list(getattr(self.nvml, query + version)(handle))
            except self.nvml.NVMLError_FunctionNotFound:
                continue
            except (AttributeError, self.nvml.NVMLError_NotSupported):
                return []
        return []

    def _event_set(self) -> Any:
        if self._events is None:
            self._events = self.nvml.nvmlEventSetCreate()
            for uuid, handle in self._handles.items():
                try:
                    self.nvml.nvmlDeviceRegisterEvents(handle, self.nvml.nvmlEventTypeXidCriticalError, self._events)
                except self.nvml.NVMLError as exc:
                    # Some boards and vGPU guests do not support events; health then stays as is.
                    logging.getLogger(__name__).warning("GPU %s: no Xid events (%s)", uuid, exc)
        return self._events

    def wait_xid(self, timeout_ms: int) -> list[XidEvent]:
        events = self._event_set()
        try:
            data = self.nvml.nvmlEventSetWait_v2(events, timeout_ms)
        except self.nvml.NVMLError_Timeout:
            return []
        if data.eventType != self.nvml.nvmlEventTypeXidCriticalError:
            return []
        uuid = _text(self.nvml.nvmlDeviceGetUUID(data.device))
        return [XidEvent(uuid=uuid, xid=int(data.eventData))]

    def compute_mode(self, uuid: str) -> int:
        return int(self.nvml.nvmlDeviceGetComputeMode(self._handles[uuid]))

    def set_compute_mode(self, uuid: str, mode: int) -> None:
        self.nvml.nvmlDeviceSetComputeMode(self._handles[uuid], mode)

    def cuda_driver_version(self) -> int:
        return int(self.nvml.nvmlSystemGetCudaDriverVersion_v2())

    def close(self) -> None:
        with self._lock:
            if self._events is not None:
                self.nvml.nvmlEventSetFree(self._events)
                self._events = None
            self.nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
