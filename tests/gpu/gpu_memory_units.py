"""Whole units on a real GPU (issue 25 item 3), run by tests/gpu/gpu_memory_units.sh.

preflight and the per-node summary read a GPU's memory with nvidia-smi and count its units with the
collection's rule (plugins/module_utils/memory_size.units_for); the device plugin, the extender and
the DRA driver read it from NVML (vgpu_components.nvml) and count with their generated copy of the
same module (vgpu_components.memory_size.units_for). On a real GPU
both reads and both rules must give the same units, or the summary and the quota check would
promise what the device plugin does not advertise. Prints PASS/FAIL lines.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "files" / "components" / "src"))

# nvml and memory_size import only pynvml and the standard library (the allocator would need the
# Kubernetes client); DeviceTable counts each GPU's units with memory_size.units_for over nvml's total_mib.
from vgpu_components import memory_size as components_size  # noqa: E402
from vgpu_components import nvml  # noqa: E402


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


memory_size = load("memory_size", ROOT / "plugins" / "module_utils" / "memory_size.py")
UNITS = (100, 256, 512, 1024)
RESERVED = (0, 512)


def main() -> int:
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,memory.total,mig.mode.current", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    smi_total = {int(line.split(",")[0]): int(line.split(",")[1]) for line in smi.splitlines() if line.strip()}
    gpus = nvml.NvmlBackend().gpus()
    failed = 0
    for gpu in gpus:
        read = smi_total.get(gpu.index)
        print(f"GPU {gpu.index} {gpu.name}: nvidia-smi memory.total {read} MiB, NVML {gpu.total_mib} MiB")
        if read == gpu.total_mib:
            print(f"PASS GPU {gpu.index}: nvidia-smi (preflight, summary) and NVML (device plugin) read {read} MiB")
        else:
            print(f"FAIL GPU {gpu.index}: nvidia-smi reads {smi_total.get(gpu.index)} MiB, NVML {gpu.total_mib} MiB")
            failed += 1
    for unit in UNITS:
        for reserved in RESERVED:
            plugin = {g.index: components_size.units_for(g.total_mib, reserved, unit) for g in gpus}
            summary = {i: memory_size.units_for(total, reserved, unit) for i, total in smi_total.items()}
            floor = {g.index: (g.total_mib - reserved) // unit for g in gpus}
            what = f"unit {unit} MiB, reserved {reserved} MiB: units {plugin}"
            if plugin == summary == floor and all(units > 0 for units in plugin.values()):
                print(f"PASS {what}: the device plugin advertises what the summary counts")
            else:
                print(f"FAIL {what}; the summary counts {summary}, floor((total - reserved) / unit) {floor}")
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
