#!/usr/bin/python
# Copyright: vgpu.isolation contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather facts about the NVIDIA GPUs and driver of a node
version_added: "0.1.0"
description:
  - Reports the NVIDIA GPUs of the node (index, UUID, name, PCI bus id, memory, compute mode, MIG mode),
    the loaded and the installed driver version, the CUDA version the driver provides, whether nouveau
    is loaded or blacklisted, the Secure Boot state and the DKMS state of the NVIDIA module.
  - Reads NVML through the C(pynvml) bindings (package C(nvidia-ml-py)) when they are importable on the
    node, and otherwise the output of C(nvidia-smi) and C(lspci). It needs nothing outside the Python
    standard library.
  - What to do about the driver is no fact; the filter C(vgpu.isolation.nvidia_driver_plan) makes the
    plan from these facts, on the controller.
  - The facts are returned as C(ansible_facts.gpu).
options:
  kernel:
    description:
      - The kernel the driver module must be built for. Defaults to the running kernel.
    type: str
  use_nvml:
    description:
      - Try the NVML Python bindings before C(nvidia-smi).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
notes:
  - Runs nothing that changes the node; check mode returns the same facts.
  - Without an NVIDIA kernel module loaded, C(gpus) is empty and C(pci_devices) still lists the cards.
requirements:
  - Python standard library on the node; C(nvidia-ml-py) optional.
author:
  - vgpu.isolation maintainers (@vgpu-isolation)
"""

EXAMPLES = r"""
- name: Gather GPU facts
  vgpu.isolation.gpu_facts:

- name: Show the GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts['gpu']['gpus'] | map(attribute='name') | list }}"

- name: Ask whether R470 must be installed, or an installed newer driver will do
  ansible.builtin.debug:
    msg: "{{ (ansible_facts['gpu'] | vgpu.isolation.nvidia_driver_plan('470.256.02', policy='minimum'))['reason'] }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts, under the key C(gpu).
  returned: always
  type: complex
  contains:
    gpu:
      description: What the node has.
      returned: always
      type: complex
      contains:
        source:
          description: Where the GPU list came from, V(nvml), V(nvidia-smi) or V(none).
          type: str
          sample: nvidia-smi
        gpu_count:
          description: Number of GPUs the driver reports.
          type: int
          sample: 1
        gpus:
          description: One entry per GPU the driver reports.
          type: list
          elements: dict
          sample:
            - index: 0
              uuid: GPU-5f1c2e0a-0000-0000-0000-000000000000
              name: NVIDIA H200
              pci_bus_id: "00000000:18:00.0"
              memory_total_mib: 143771
              memory_used_mib: 0
              memory_free_mib: 143150
              compute_mode: Default
              mig_mode: Disabled
              mig_enabled: false
              persistence_mode: Enabled
        pci_devices:
          description: NVIDIA display and 3D controllers that C(lspci) lists, driver or not.
          type: list
          elements: dict
          sample:
            - slot: "0000:18:00.0"
              class: 3D controller
              name: NVIDIA Corporation GH100
              vendor_id: "10de"
              device_id: "2335"
        driver_loaded_version:
          description: Version of the loaded kernel module (from /proc/driver/nvidia/version), or null.
          type: str
          sample: "470.256.02"
        driver_installed_version:
          description: Version of the module installed for O(kernel) (C(modinfo)), else of the loaded one, or null.
          type: str
          sample: "470.256.02"
        cuda_version:
          description: Highest CUDA version the driver supports, or null.
          type: str
          sample: "11.4"
        nouveau_loaded:
          description: Whether the nouveau module is loaded.
          type: bool
        nouveau_blacklisted_in:
          description: modprobe.d files that blacklist nouveau.
          type: list
          elements: str
          sample: ["/etc/modprobe.d/vgpu-blacklist-nouveau.conf"]
        secure_boot:
          description: Whether Secure Boot is on; null when the node cannot tell.
          type: bool
        dkms_status:
          description: Lines of C(dkms status) that name an NVIDIA module.
          type: list
          elements: str
        reboot_required:
          description:
            - True when nouveau is loaded next to an installed NVIDIA driver,
              or the loaded module is not the installed one.
          type: bool
        reboot_reasons:
          description: Why a reboot is required.
          type: list
          elements: str
        kernel:
          description: The kernel the facts are for.
          type: str
        distribution:
          description: C(ID) and major C(VERSION_ID) of /etc/os-release.
          type: dict
          sample: {"id": "debian", "major": "12"}
"""

import glob
import os
from typing import Any, Dict, List, Optional, Tuple

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vgpu.isolation.plugins.module_utils.gpu_info import (
    SMI_GPU_FIELDS,
    is_main_nvidia_module,
    modprobe_blacklists,
    parse_dkms_version,
    parse_efivar_secureboot,
    parse_lspci,
    parse_mokutil,
    parse_proc_version,
    parse_smi_gpus,
    parse_smi_header,
)

try:
    import pynvml  # optional: nvidia-ml-py

    HAS_PYNVML = True
except ImportError:
    HAS_PYNVML = False

PROC_VERSION = "/proc/driver/nvidia/version"
EFI_SECUREBOOT = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
MODPROBE_DIRS = ("/etc/modprobe.d", "/usr/lib/modprobe.d", "/lib/modprobe.d", "/run/modprobe.d")


def read_text(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def run_tool(module: AnsibleModule, name: str, args: List[str]) -> Tuple[Optional[int], str]:
    """Run a read-only tool if the node has it; (None, '') when it does not."""
    path = module.get_bin_path(name, opt_dirs=["/usr/sbin", "/sbin", "/usr/bin"])
    if not path:
        return None, ""
    rc, out, err = module.run_command([path, *args])
    return rc, out if rc == 0 else out + err


def nvml_gpus() -> Tuple[List[Dict[str, Any]], Optional[str], Optional[str]]:
    """GPUs, driver version and CUDA version through NVML."""
    pynvml.nvmlInit()
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda_int = pynvml.nvmlSystemGetCudaDriverVersion()
        cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            try:
                mig_current = pynvml.nvmlDeviceGetMigMode(handle)[0]
                mig: Optional[str] = "Enabled" if mig_current else "Disabled"
            except pynvml.NVMLError:
                mig = None  # pre-Ampere GPUs and old drivers have no MIG
            modes = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}
            persistence = pynvml.nvmlDeviceGetPersistenceMode(handle)
            gpus.append(
                {
                    "index": index,
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                    "memory_total_mib": memory.total // 1048576,
                    "memory_used_mib": memory.used // 1048576,
                    "memory_free_mib": memory.free // 1048576,
                    "compute_mode": modes.get(pynvml.nvmlDeviceGetComputeMode(handle), "Unknown"),
                    "mig_mode": mig,
                    "mig_enabled": mig == "Enabled",
                    "persistence_mode": "Enabled" if persistence else "Disabled",
                }
            )
        return gpus, driver, cuda
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def smi_gpus(module: AnsibleModule) -> Tuple[Optional[List[Dict[str, Any]]], Optional[str], Optional[str]]:
    """GPUs, driver and CUDA version through nvidia-smi; (None, None, None) when it cannot answer."""
    rc, banner = run_tool(module, "nvidia-smi", [])
    if rc != 0:
        return None, None, None
    header = parse_smi_header(banner)
    query = f"--query-gpu={','.join(SMI_GPU_FIELDS)}"
    rc, out = run_tool(module, "nvidia-smi", [query, "--format=csv,noheader,nounits"])
    if rc != 0:
        return None, header["driver_version"], header["cuda_version"]
    return parse_smi_gpus(out), header["driver_version"], header["cuda_version"]


def secure_boot_state(module: AnsibleModule) -> Optional[bool]:
    rc, out = run_tool(module, "mokutil", ["--sb-state"])
    state = parse_mokutil(out) if rc is not None else None
    if state is not None:
        return state
    try:
        with open(EFI_SECUREBOOT, "rb") as handle:
            return parse_efivar_secureboot(handle.read())
    except OSError:
        return False if not os.path.isdir("/sys/firmware/efi") else None


def os_release() -> Dict[str, str]:
    fields: Dict[str, str] = {}
    for line in (read_text("/etc/os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return {"id": fields.get("ID", ""), "major": fields.get("VERSION_ID", "").split(".")[0]}


def installed_version(module: AnsibleModule, kernel: str, dkms_status: str) -> Optional[str]:
    """Version of the NVIDIA module installed for ``kernel``, whatever the distribution named it."""
    names = ["nvidia"]
    for path in glob.glob(f"/lib/modules/{kernel}/**/nvidia*.ko*", recursive=True):
        name = os.path.basename(path).split(".ko", 1)[0]
        if is_main_nvidia_module(name) and name not in names:
            names.append(name)  # Debian installs nvidia-tesla-470.ko, for one
    for name in names:
        rc, out = run_tool(module, "modinfo", ["-k", kernel, "-F", "version", name])
        if rc == 0 and out.strip():
            return out.strip().splitlines()[0]
    return parse_dkms_version(dkms_status, kernel)


def gather(module: AnsibleModule) -> Dict[str, Any]:
    params = module.params
    kernel = params["kernel"] or os.uname().release
    source = "none"
    gpus: List[Dict[str, Any]] = []
    driver_smi: Optional[str] = None
    cuda: Optional[str] = None
    if params["use_nvml"] and HAS_PYNVML:
        try:
            gpus, driver_smi, cuda = nvml_gpus()
            source = "nvml"
        except (pynvml.NVMLError, AttributeError, OSError):
            # No driver loaded, library and module disagree, or bindings newer than the driver's NVML:
            # nvidia-smi says more.
            source = "none"
    if source == "none":
        smi_list, driver_smi, cuda = smi_gpus(module)
        if smi_list is not None:
            gpus, source = smi_list, "nvidia-smi"

    loaded = parse_proc_version(read_text(PROC_VERSION) or "") or driver_smi
    _dkms_rc, dkms = run_tool(module, "dkms", ["status"])
    installed = installed_version(module, kernel, dkms) or loaded
    rc, lspci = run_tool(module, "lspci", ["-Dnn"])

    modprobe = {}
    for folder in MODPROBE_DIRS:
        for path in glob.glob(os.path.join(folder, "*.conf")):
            modprobe[path] = read_text(path) or ""
    nouveau_loaded = os.path.isdir("/sys/module/nouveau")

    reasons = []
    if nouveau_loaded and installed:
        reasons.append("nouveau is loaded and holds the GPU")
    if loaded and installed and loaded != installed:
        reasons.append(f"loaded driver {loaded} is not the installed {installed}")

    facts: Dict[str, Any] = {
        "source": source,
        "gpu_count": len(gpus),
        "gpus": gpus,
        "pci_devices": parse_lspci(lspci) if rc == 0 else [],
        "driver_loaded_version": loaded,
        "driver_installed_version": installed,
        "cuda_version": cuda,
        "nouveau_loaded": nouveau_loaded,
        "nouveau_blacklisted_in": modprobe_blacklists(modprobe, "nouveau"),
        "secure_boot": secure_boot_state(module),
        "dkms_status": [line for line in dkms.splitlines() if "nvidia" in line.lower()],
        "reboot_required": bool(reasons),
        "reboot_reasons": reasons,
        "kernel": kernel,
        "distribution": os_release(),
    }
    return facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "kernel": {"type": "str"},
            "use_nvml": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, ansible_facts={"gpu": gather(module)})


if __name__ == "__main__":
    main()
