# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Parsers for what a GPU node tells about its GPUs and driver.

Everything here is pure: it takes the text a tool printed or a file held and returns plain data,
so the modules stay thin and the parsing is unit-tested without a GPU.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

NVIDIA_PCI_VENDOR = "10de"

# The nvidia-smi query used when NVML bindings are absent; the order matters for parse_smi_gpus.
SMI_GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "memory.free",
    "compute_mode",
    "mig.mode.current",
    "persistence_mode",
)

# nvidia-smi's table prints "  1200MiB /  3000MiB" for each GPU's memory use.
_SMI_TABLE_MEMORY = re.compile(r"(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")


def version_tuple(version: str) -> Tuple[int, ...]:
    """``470.256.02`` -> ``(470, 256, 2)``; non-numeric parts end the tuple."""
    parts: List[int] = []
    for piece in re.split(r"[.\-~+]", version.strip()):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    if not parts:
        raise ValueError(f"driver version {version!r} does not start with a number (expected e.g. 470.256.02)")
    return tuple(parts)


def branch_of(version: str) -> str:
    """The driver branch of a version: ``580.95.05`` -> ``580``."""
    return str(version_tuple(version)[0])


def parse_proc_version(text: str) -> Optional[str]:
    """The loaded kernel module's version from /proc/driver/nvidia/version."""
    match = re.search(r"Kernel Module(?: for [\w-]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return match.group(1) if match else None


def parse_smi_header(text: str) -> Dict[str, Optional[str]]:
    """Driver and CUDA version from the banner of plain ``nvidia-smi``."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    return {"driver_version": driver.group(1) if driver else None, "cuda_version": cuda.group(1) if cuda else None}


def _smi_value(raw: str) -> Optional[str]:
    value = raw.strip()
    if value in ("", "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]"):
        return None
    return value


def _int_or_none(raw: Optional[str]) -> Optional[int]:
    if raw is None:
        return None
    match = re.match(r"^(\d+)", raw)
    return int(match.group(1)) if match else None


def parse_smi_gpus(text: str) -> List[Dict[str, Any]]:
    """GPUs from ``nvidia-smi --query-gpu=<SMI_GPU_FIELDS> --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [_smi_value(cell) for cell in line.split(",")]
        if len(cells) != len(SMI_GPU_FIELDS):
            raise ValueError(f"nvidia-smi printed {len(cells)} fields, {len(SMI_GPU_FIELDS)} were asked for: {line!r}")
        row = dict(zip(SMI_GPU_FIELDS, cells))
        mig = row["mig.mode.current"]
        gpus.append(
            {
                "index": _int_or_none(row["index"]),
                "uuid": row["uuid"],
                "name": row["name"],
                "pci_bus_id": row["pci.bus_id"],
                "memory_total_mib": _int_or_none(row["memory.total"]),
                "memory_used_mib": _int_or_none(row["memory.used"]),
                "memory_free_mib": _int_or_none(row["memory.free"]),
                "compute_mode": row["compute_mode"],
                "mig_mode": mig,
                "mig_enabled": mig is not None and mig.lower() == "enabled",
                "persistence_mode": row["persistence_mode"],
            }
        )
    return gpus


def parse_smi_memory(text: str) -> Tuple[int, int]:
    """``used, total`` MiB of the first GPU nvidia-smi printed, in either of its two forms.

    ``--query-gpu=memory.used,memory.total --format=csv,noheader,nounits`` prints ``1200, 3000`` (what
    vgpu_verify asks for); plain ``nvidia-smi`` prints a table with ``1200MiB /  3000MiB`` (what the
    verification pod's log holds). Only the first GPU counts: the callers look at one GPU.
    """
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) == 2 and cells[0].isdigit() and cells[1].isdigit():
            return int(cells[0]), int(cells[1])
    match = _SMI_TABLE_MEMORY.search(text)
    if match:
        return int(match.group(1)), int(match.group(2))
    raise ValueError(f"nvidia-smi did not print 'used, total' or 'usedMiB / totalMiB': {text.strip()[:200]!r}")


# libvgpu's own report (`/opt/vgpu/manage --stats`): "device 0 GPU-...: quota 3000 MiB, used 1200.0 MiB, ..."
_VGPU_REPORT_MEMORY = re.compile(r"quota (\d+) MiB, used (\d+(?:\.\d+)?) MiB")


def parse_vgpu_report_memory(text: str) -> Tuple[int, int]:
    """``used, quota`` MiB of the first GPU in libvgpu's report, for containers without nvidia-smi."""
    match = _VGPU_REPORT_MEMORY.search(text)
    if not match:
        raise ValueError(f"no libvgpu report ('quota N MiB, used M MiB') in: {text.strip()[:200]!r}")
    return round(float(match.group(2))), int(match.group(1))


def parse_lspci(text: str) -> List[Dict[str, str]]:
    """NVIDIA display and 3D controllers from ``lspci -Dnn``."""
    devices = []
    pattern = re.compile(r"^(\S+)\s+(.*?)\s*\[(03[0-9a-f]{2})\]:\s*(.*?)\s*\[(10de):([0-9a-f]{4})\]", re.IGNORECASE)
    for line in text.splitlines():
        match = pattern.match(line.strip())
        if match:
            devices.append(
                {
                    "slot": match.group(1),
                    "class": match.group(2),
                    "name": match.group(4),
                    "vendor_id": match.group(5).lower(),
                    "device_id": match.group(6).lower(),
                }
            )
    return devices


def parse_mokutil(text: str) -> Optional[bool]:
    """Secure Boot state from ``mokutil --sb-state``; None when it cannot tell."""
    lowered = text.lower()
    if "secureboot enabled" in lowered:
        return True
    if "secureboot disabled" in lowered or "efi variables are not supported" in lowered:
        return False
    return None


def parse_efivar_secureboot(data: bytes) -> Optional[bool]:
    """Secure Boot state from the SecureBoot EFI variable: 4 attribute bytes, then the value."""
    if len(data) < 5:
        return None
    return data[4] == 1


def modprobe_blacklists(files: Dict[str, str], module: str) -> List[str]:
    """The modprobe.d files (name -> text) that blacklist ``module``."""
    found = []
    pattern = re.compile(rf"^\s*blacklist\s+{re.escape(module)}\s*$", re.MULTILINE)
    for name, text in sorted(files.items()):
        if pattern.search(text):
            found.append(name)
    return found


def parse_dkms_version(text: str, kernel: str) -> Optional[str]:
    """The NVIDIA module version DKMS installed for ``kernel``, from ``dkms status``.

    Lines look like ``nvidia-tesla-470/470.256.02, 6.1.0-57-amd64, x86_64: installed`` (dkms 3) or
    ``nvidia, 470.256.02, 6.1.0-57-amd64, x86_64: installed`` (dkms 2).
    """
    pattern = re.compile(r"^(nvidia[\w-]*)(?:/|,\s*)(\d+\.\d+(?:\.\d+)?),\s*(\S+),.*:\s*installed", re.IGNORECASE)
    for line in text.splitlines():
        match = pattern.match(line.strip())
        if match and match.group(3) == kernel:
            return match.group(2)
    return None


def is_main_nvidia_module(name: str) -> bool:
    """``nvidia`` or a distribution's renamed copy of it (``nvidia-current``, ``nvidia-tesla-470``)."""
    base = name.split(".ko", 1)[0].replace("_", "-")
    return base.startswith("nvidia") and not re.search(r"-(modeset|drm|uvm|peermem|fs)$", base)
