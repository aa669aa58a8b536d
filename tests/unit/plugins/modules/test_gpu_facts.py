"""gpu_facts on the node shapes the roles meet: R470 loaded, the H200 host with 580, a fresh node;
and the nvidia_driver role's plan (filter nvidia_driver_plan) made from those facts.

There is no GPU and no NVIDIA driver here, so the tools' outputs and the /proc and /sys files are
canned (taken from real nodes); the module's decisions on them are the real code.
"""

import json
from typing import Any, Optional

import pytest
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vgpu.isolation.plugins.filter.platform import nvidia_driver_plan
from ansible_collections.vgpu.isolation.plugins.modules import gpu_facts

SMI_470 = (
    "| NVIDIA-SMI 470.256.02   Driver Version: 470.256.02   CUDA Version: 11.4     |\n",
    "0, GPU-8f0c9c2e-1d5b-2a7e-9c6b-3f1e2d4c5b6a, Tesla T4, 00000000:3B:00.0, 15109, 0, 15109, Default, [N/A], "
    "Enabled\n",
)
SMI_580 = (
    "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |\n",
    "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA H200, 00000000:18:00.0, 143771, 0, 143150, Default, Disabled, "
    "Enabled\n",
)
LSPCI_T4 = "0000:3b:00.0 3D controller [0302]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)\n"
OS_DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
OS_UBUNTU = 'NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n'


class FakeNode:
    """Answers the module's tool calls and file reads like one node would."""

    def __init__(
        self,
        *,
        smi: Optional[tuple] = None,
        proc: Optional[str] = None,
        modinfo: Optional[str] = None,
        lspci: str = LSPCI_T4,
        os_release: str = OS_DEBIAN,
        nouveau_loaded: bool = False,
        sb_state: str = "SecureBoot disabled\n",
        dkms: str = "",
    ):
        self.dkms = dkms
        self.smi, self.proc, self.modinfo, self.lspci = smi, proc, modinfo, lspci
        self.os_release, self.nouveau_loaded, self.sb_state = os_release, nouveau_loaded, sb_state

    def run_tool(self, _module: Any, name: str, args: list):
        if name == "nvidia-smi":
            if self.smi is None:
                return None, ""
            return 0, self.smi[1] if args else self.smi[0]
        if name == "modinfo":
            return (0, self.modinfo + "\n") if self.modinfo else (1, "modinfo: ERROR: Module nvidia not found.\n")
        answers = {"lspci": (0, self.lspci), "mokutil": (0, self.sb_state), "dkms": (0, self.dkms)}
        return answers.get(name, (None, ""))

    def read_text(self, path: str) -> Optional[str]:
        files = {"/etc/os-release": self.os_release, gpu_facts.PROC_VERSION: self.proc}
        return files.get(path)


@pytest.fixture
def gather(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    def run(node: FakeNode, **args: Any) -> dict[str, Any]:
        monkeypatch.setattr(gpu_facts, "run_tool", node.run_tool)
        monkeypatch.setattr(gpu_facts, "read_text", node.read_text)
        monkeypatch.setattr(gpu_facts.glob, "glob", lambda _pattern, recursive=False: [])
        real_isdir = gpu_facts.os.path.isdir
        monkeypatch.setattr(
            gpu_facts.os.path, "isdir", lambda p: node.nouveau_loaded if p == "/sys/module/nouveau" else real_isdir(p)
        )
        with patch_module_args({"use_nvml": False, "kernel": "6.1.0-41-amd64", **args}), pytest.raises(SystemExit):
            gpu_facts.main()
        result: dict[str, Any] = json.loads(capsys.readouterr().out)
        return result

    return run


def test_a_node_running_r470_reports_its_gpu_and_needs_nothing(gather):
    result = gather(
        FakeNode(
            smi=SMI_470, proc="NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu\n", modinfo="470.256.02"
        ),
    )
    facts = result["ansible_facts"]["gpu"]
    assert result["changed"] is False
    assert facts["source"] == "nvidia-smi"
    assert facts["gpu_count"] == 1
    assert facts["gpus"][0]["name"] == "Tesla T4"
    assert facts["driver_loaded_version"] == "470.256.02"
    assert facts["cuda_version"] == "11.4"
    assert facts["secure_boot"] is False
    assert facts["reboot_required"] is False
    plan = nvidia_driver_plan(facts, "470.256.02")
    assert plan["action"] == "none"
    assert plan["packages"][0] == "nvidia-tesla-470-driver"


def test_the_h200_host_with_580_is_left_alone_under_minimum(gather):
    node = FakeNode(
        smi=SMI_580,
        proc="NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release\n",
        modinfo="580.95.05",
        os_release=OS_UBUNTU,
    )
    facts = gather(node)["ansible_facts"]["gpu"]
    plan = nvidia_driver_plan(facts, "470.256.02", policy="minimum")
    assert plan["action"] == "none"
    assert "580.95.05 satisfies at least branch 470" in plan["reason"]
    assert facts["gpus"][0]["memory_total_mib"] == 143771


def test_the_same_host_under_exact_reports_drift(gather):
    node = FakeNode(smi=SMI_580, proc="Kernel Module  580.95.05  Release\n", modinfo="580.95.05", os_release=OS_UBUNTU)
    plan = nvidia_driver_plan(gather(node)["ansible_facts"]["gpu"], "470.256.02")
    assert plan["action"] == "install"
    assert plan["drift"] is True


def test_a_fresh_node_lists_its_card_from_lspci_and_plans_an_install(gather):
    facts = gather(FakeNode())["ansible_facts"]["gpu"]
    assert facts["source"] == "none"
    assert facts["gpus"] == []
    assert facts["pci_devices"][0]["device_id"] == "1eb8"
    assert facts["driver_loaded_version"] is None
    assert nvidia_driver_plan(facts, "470.256.02")["action"] == "install"
    assert "driver_plan" not in facts, "the plan is no fact (issue 13)"


def test_nouveau_next_to_an_installed_driver_requires_a_reboot(gather):
    facts = gather(FakeNode(modinfo="470.256.02", nouveau_loaded=True))["ansible_facts"]["gpu"]
    assert facts["nouveau_loaded"] is True
    assert facts["reboot_required"] is True
    assert "nouveau" in facts["reboot_reasons"][0]


def test_a_loaded_driver_older_than_the_installed_one_requires_a_reboot(gather):
    node = FakeNode(smi=SMI_470, proc="Kernel Module  470.239.06  Thu\n", modinfo="470.256.02")
    facts = gather(node)["ansible_facts"]["gpu"]
    assert facts["reboot_reasons"] == ["loaded driver 470.239.06 is not the installed 470.256.02"]


def test_secure_boot_is_reported(gather):
    assert gather(FakeNode(sb_state="SecureBoot enabled\n"))["ansible_facts"]["gpu"]["secure_boot"] is True


def test_a_driver_version_outside_the_branch_fails_with_the_reason(gather):
    facts = gather(FakeNode())["ansible_facts"]["gpu"]
    with pytest.raises(AnsibleFilterError, match="not in branch '470'"):
        nvidia_driver_plan(facts, "535.183.01", branch="470")


def test_an_unsupported_distribution_fails_with_the_list(gather):
    facts = gather(FakeNode(os_release="ID=arch\n"))["ansible_facts"]["gpu"]
    with pytest.raises(AnsibleFilterError, match="distribution 'arch' is not supported"):
        nvidia_driver_plan(facts, "470.256.02")


def test_without_a_driver_nvml_falls_back_to_nvidia_smi_and_lspci(gather):
    """This machine has nvidia-ml-py but no driver library: NVML init fails and the module goes on."""
    facts = gather(FakeNode(), use_nvml=True)["ansible_facts"]["gpu"]
    assert facts["source"] == "none"
    assert facts["pci_devices"]


def test_a_debian_node_with_the_renamed_module_built_by_dkms_counts_as_installed(gather):
    """Debian installs nvidia-tesla-470.ko, which modinfo does not find as nvidia: dkms status tells."""
    node = FakeNode(dkms="nvidia-tesla-470/470.256.02, 6.1.0-41-amd64, x86_64: installed\n")
    facts = gather(node)["ansible_facts"]["gpu"]
    assert facts["driver_installed_version"] == "470.256.02"
    assert facts["dkms_status"] == ["nvidia-tesla-470/470.256.02, 6.1.0-41-amd64, x86_64: installed"]
    assert nvidia_driver_plan(facts, "470.256.02")["action"] == "none"
