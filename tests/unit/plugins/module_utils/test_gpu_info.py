"""Parsing what a GPU node prints: nvidia-smi, /proc, lspci, mokutil, modprobe.d."""

import pytest
from ansible_collections.vgpu.isolation.plugins.module_utils import gpu_info

# nvidia-smi 470 on a T4 and 580 on an H200, as --query-gpu=<SMI_GPU_FIELDS> prints them.
SMI_TWO_GPUS = """\
0, GPU-8f0c9c2e-1d5b-2a7e-9c6b-3f1e2d4c5b6a, Tesla T4, 00000000:3B:00.0, 15109, 0, 15109, Default, [N/A], Enabled
1, GPU-11111111-2222-3333-4444-555555555555, NVIDIA H200, 00000000:18:00.0, 143771, 621, 143150, \
Exclusive_Process, Disabled, Disabled
"""

SMI_BANNER = """\
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4     |
|-------------------------------+----------------------+----------------------+
"""

PROC_470 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:39:58 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)
PROC_580_OPEN = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build\n"

LSPCI = """\
0000:00:02.0 VGA compatible controller [0300]: Intel Corporation UHD Graphics 630 [8086:3e92]
0000:3b:00.0 3D controller [0302]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)
0000:18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM 141GB] [10de:2335] (rev a1)
0000:18:00.1 Audio device [0403]: NVIDIA Corporation Device [10de:22ba]
"""


def test_driver_versions_compare_numerically():
    assert gpu_info.version_tuple("470.256.02") == (470, 256, 2)
    assert gpu_info.version_tuple("580.95.05") > gpu_info.version_tuple("470.256.02")
    assert gpu_info.version_tuple("470.256.02-1~deb12u1") == (470, 256, 2, 1)
    assert gpu_info.branch_of("580.95.05") == "580"
    with pytest.raises(ValueError, match="does not start with a number"):
        gpu_info.version_tuple("latest")


def test_loaded_module_version_from_proc_proprietary_and_open():
    assert gpu_info.parse_proc_version(PROC_470) == "470.256.02"
    assert gpu_info.parse_proc_version(PROC_580_OPEN) == "580.95.05"
    assert gpu_info.parse_proc_version("") is None


def test_driver_and_cuda_version_from_the_nvidia_smi_banner():
    assert gpu_info.parse_smi_header(SMI_BANNER) == {"driver_version": "470.256.02", "cuda_version": "11.4"}
    assert gpu_info.parse_smi_header("NVIDIA-SMI has failed") == {"driver_version": None, "cuda_version": None}


def test_gpus_from_nvidia_smi_query():
    gpus = gpu_info.parse_smi_gpus(SMI_TWO_GPUS)
    assert [gpu["index"] for gpu in gpus] == [0, 1]
    t4, h200 = gpus
    assert t4["uuid"] == "GPU-8f0c9c2e-1d5b-2a7e-9c6b-3f1e2d4c5b6a"
    assert t4["memory_total_mib"] == 15109
    assert t4["mig_mode"] is None  # a T4 has no MIG: nvidia-smi prints [N/A]
    assert t4["mig_enabled"] is False
    assert h200["name"] == "NVIDIA H200"
    assert h200["compute_mode"] == "Exclusive_Process"
    assert h200["memory_used_mib"] == 621
    assert h200["pci_bus_id"] == "00000000:18:00.0"


def test_a_changed_nvidia_smi_format_is_an_error_not_a_wrong_answer():
    with pytest.raises(ValueError, match="fields"):
        gpu_info.parse_smi_gpus("0, GPU-x, Tesla T4\n")


def test_used_and_total_from_the_memory_query_and_from_the_table():
    assert gpu_info.parse_smi_memory("1200, 3000\n") == (1200, 3000)
    assert gpu_info.parse_smi_memory("| N/A   34C    P0    26W /  70W |   1200MiB /  3000MiB |") == (1200, 3000)
    with pytest.raises(ValueError, match="used, total"):
        gpu_info.parse_smi_memory("Failed to initialize NVML: Driver/library version mismatch\n")


def test_lspci_lists_nvidia_gpus_but_not_their_audio_function_or_other_vendors():
    devices = gpu_info.parse_lspci(LSPCI)
    assert [(d["slot"], d["device_id"]) for d in devices] == [("0000:3b:00.0", "1eb8"), ("0000:18:00.0", "2335")]
    assert devices[0]["class"] == "3D controller"


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("SecureBoot enabled\n", True),
        ("SecureBoot disabled\n", False),
        ("EFI variables are not supported on this system\n", False),
        ("", None),
    ],
)
def test_secure_boot_from_mokutil(text, state):
    assert gpu_info.parse_mokutil(text) is state


def test_secure_boot_from_the_efi_variable():
    assert gpu_info.parse_efivar_secureboot(b"\x06\x00\x00\x00\x01") is True
    assert gpu_info.parse_efivar_secureboot(b"\x06\x00\x00\x00\x00") is False
    assert gpu_info.parse_efivar_secureboot(b"") is None


def test_nouveau_blacklist_is_found_only_where_it_is_active():
    files = {
        "/etc/modprobe.d/vgpu-blacklist-nouveau.conf": "blacklist nouveau\noptions nouveau modeset=0\n",
        "/etc/modprobe.d/comment.conf": "# blacklist nouveau\n",
        "/lib/modprobe.d/other.conf": "blacklist nouveaux\n",
    }
    assert gpu_info.modprobe_blacklists(files, "nouveau") == ["/etc/modprobe.d/vgpu-blacklist-nouveau.conf"]


def test_the_installed_module_version_from_dkms_status_for_the_kernel():
    status = (
        "nvidia-tesla-470/470.256.02, 6.1.0-57-amd64, x86_64: installed\n"
        "nvidia-tesla-470/470.256.02, 6.1.0-41-amd64, x86_64: built\n"
        "nvidia, 535.183.01, 5.15.0-91-generic, x86_64: installed\n"
    )
    assert gpu_info.parse_dkms_version(status, "6.1.0-57-amd64") == "470.256.02"
    assert gpu_info.parse_dkms_version(status, "5.15.0-91-generic") == "535.183.01"
    assert gpu_info.parse_dkms_version(status, "6.1.0-41-amd64") is None  # built, not installed


@pytest.mark.parametrize(
    ("name", "main"),
    [
        ("nvidia", True),
        ("nvidia-tesla-470", True),
        ("nvidia-current.ko", True),
        ("nvidia_uvm", False),
        ("nvidia-tesla-470-modeset", False),
        ("nvidia-drm.ko.xz", False),
        ("nouveau", False),
    ],
)
def test_the_main_nvidia_module_is_told_from_its_companions(name, main):
    assert gpu_info.is_main_nvidia_module(name) is main
