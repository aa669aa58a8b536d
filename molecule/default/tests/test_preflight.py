"""What preflight leaves on a node that passed, and what it says on one that cannot be provisioned.

The container has no GPU, which is exactly the case the product's `make site` must report cleanly.
"""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_preflight_records_what_it_found(host):
    fact = host.file("/etc/ansible/facts.d/vgpu_preflight.fact")
    assert fact.exists
    assert fact.mode == 0o644
    record = json.loads(fact.content_string)
    assert record["distribution"] == "Debian"
    assert record["distribution_version"].startswith("12")
    assert record["nvidia_pci_devices"] == []
    assert record["nvidia_device_files"] == []
    assert record["kubernetes_flavour"] == "none"


def _preflight(*extra_vars: str) -> str:
    """Run preflight against the scenario's instance with a GPU required, as a gpu_nodes member would."""
    playbook = ROOT / "molecule" / "default" / "converge.yml"
    args = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(playbook)]
    for extra in extra_vars:
        args += ["-e", extra]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False, env=env)
    assert result.returncode != 0, "preflight should have stopped the play"
    return result.stdout + result.stderr


def test_a_node_without_gpu_is_stopped_with_a_report_and_left_unchanged(host, tmp_path):
    before = host.file("/etc/ansible/facts.d/vgpu_preflight.fact").content_string
    # A cluster flavour also needs the component image: give preflight a tarball, so that the
    # missing GPU is the one problem (the image check has its own tests in tests/unit).
    tarball = tmp_path / "vgpu-components-0.1.0.tar"
    tarball.write_bytes(b"")
    output = _preflight(
        "preflight_require_gpu=true", "vgpu_kubernetes_flavour=k3s", f"vgpu_component_image_tarball={tarball}"
    )
    assert "Preflight found 1 problem(s)" in output
    assert "no NVIDIA GPU found" in output
    assert "Traceback" not in output
    assert host.file("/etc/ansible/facts.d/vgpu_preflight.fact").content_string == before


def test_bad_settings_are_all_named_in_one_report(host):
    output = _preflight('{"vgpu_sample_app_quota": "3000MB", "vgpu_mps_active_thread_percentage": 101}')
    assert "The settings have 2 problem(s); nothing was changed" in output, output
    assert "vgpu_sample_app_quota: '3000MB'" in output
    assert "vgpu_mps_active_thread_percentage: 101" in output
