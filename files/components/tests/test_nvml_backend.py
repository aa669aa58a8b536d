"""NvmlBackend's process query against drivers that lack some of NVML's versioned calls.

pynvml's unversioned nvmlDevice*RunningProcesses call the _v3 functions, which R470 (the default
branch, CUDA 11.4) does not have: pynvml then raises NVMLLibraryMismatchError. A stand-in for the
pynvml module is used because no NVIDIA library runs here; the real pynvml against libvgpu's fake
NVML is tested in files/libvgpu/tests/components_nvml.py, and against the H200 in ground_truth.sh.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from vgpu_components import nvml
from vgpu_components.nvml import ProcessMemory


class Driver:
    """pynvml with only the given process calls; the others are missing from the library."""

    def __init__(self, present: dict[str, list[tuple[int, int | None]]]) -> None:
        self.present = present
        self.NVMLError_NotSupported = pynvml.NVMLError_NotSupported
        self.NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound

    def __getattr__(self, name: str) -> Any:
        if "RunningProcesses" not in name:
            return getattr(pynvml, name)

        def call(handle: object) -> list[SimpleNamespace]:
            if name not in self.present:
                if name.endswith(("_v2", "_v3")):
                    raise pynvml.NVMLError_FunctionNotFound(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
                raise pynvml.NVMLLibraryMismatchError("Unversioned function called")
            return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.present[name]]

        return call


def backend_on(driver: Driver) -> nvml.NvmlBackend:
    backend = nvml.NvmlBackend.__new__(nvml.NvmlBackend)
    backend.nvml = driver
    backend._handles = {"GPU-0": object()}  # pylint: disable=protected-access
    return backend


@pytest.mark.parametrize(
    ("present", "want"),
    [
        pytest.param(
            {
                "nvmlDeviceGetComputeRunningProcesses_v2": [(10, 100)],
                "nvmlDeviceGetMPSComputeRunningProcesses_v2": [(11, 200)],
            },
            [ProcessMemory(10, 100), ProcessMemory(11, 200)],
            id="R470: only the _v2 calls",
        ),
        pytest.param(
            {"nvmlDeviceGetComputeRunningProcesses_v3": [(10, 100), (12, None)]},
            [ProcessMemory(10, 100)],
            id="no MPS call at all (libvgpu's fake NVML)",
        ),
        pytest.param(
            {
                "nvmlDeviceGetComputeRunningProcesses_v3": [(10, 100)],
                "nvmlDeviceGetMPSComputeRunningProcesses_v3": [(10, 300)],
            },
            [ProcessMemory(10, 300)],
            id="current drivers: _v3, a PID seen twice counts once at its larger use",
        ),
    ],
)
def test_processes_use_the_newest_call_the_driver_has(
    present: dict[str, list[tuple[int, int | None]]], want: list[ProcessMemory]
) -> None:
    assert backend_on(Driver(present)).processes("GPU-0") == want


@pytest.mark.parametrize(
    ("present", "want"),
    [
        pytest.param(
            {
                "nvmlDeviceGetComputeRunningProcesses_v3": [(10, 100)],
                "nvmlDeviceGetGraphicsRunningProcesses_v3": [(20, 5000)],
            },
            [ProcessMemory(10, 100), ProcessMemory(20, 5000)],
            id="a Vulkan process beside a CUDA one",
        ),
        pytest.param(
            {
                "nvmlDeviceGetComputeRunningProcesses_v2": [],
                "nvmlDeviceGetGraphicsRunningProcesses_v2": [(20, 5000)],
            },
            [ProcessMemory(20, 5000)],
            id="R470: the _v2 call",
        ),
    ],
)
def test_graphics_processes_are_read_like_compute_ones(
    present: dict[str, list[tuple[int, int | None]]], want: list[ProcessMemory]
) -> None:
    """Issue 38 item 3: only the compute and MPS lists were read, so a Vulkan or OpenGL process
    holding GPU memory was never seen (the runtime hands the graphics libraries to a container
    that asks for them)."""
    assert backend_on(Driver(present)).processes("GPU-0") == want


class MemoryDriver:
    """pynvml's memory call on a driver with (R510 and later) or without (R470) its v2."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(self, has_v2: bool) -> None:
        self.has_v2 = has_v2

    def nvmlDeviceGetMemoryInfo(self, handle: object, version: int | None = None) -> SimpleNamespace:
        mib = 1024 * 1024
        if version is None:  # v1: used includes the driver's reserve
            return SimpleNamespace(total=143771 * mib, used=(5000 + 600) * mib, free=(143771 - 5600) * mib)
        if not self.has_v2:
            raise pynvml.NVMLError_FunctionNotFound(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return SimpleNamespace(total=143771 * mib, reserved=600 * mib, used=5000 * mib, free=(143771 - 5600) * mib)


@pytest.mark.parametrize(("has_v2", "reserved"), [(True, 600), (False, 0)])
def test_memory_tells_the_drivers_reserve_apart_where_the_driver_can(has_v2: bool, reserved: int) -> None:
    """The reconciliation of the monitor (attribution.py) compares what processes hold with what the
    GPU holds for processes: used less the driver's reserve, which only the v2 call reports."""
    backend = nvml.NvmlBackend.__new__(nvml.NvmlBackend)
    backend.nvml = MemoryDriver(has_v2)
    backend._handles = {"GPU-0": object()}  # pylint: disable=protected-access
    assert backend.memory("GPU-0") == nvml.Memory(total_mib=143771, used_mib=5600, reserved_mib=reserved)
