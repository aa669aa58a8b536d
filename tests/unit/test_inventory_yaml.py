"""files/site/inventory_yaml.py (issue 41 item 1): a YAML mistake in the inventory named by file and line.

Ansible said "YAML parsing failed: While parsing a flow sequence did not find expected ',' or ']'"
without naming group_vars/all.yml or its line; `make check` runs this first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "files" / "site" / "inventory_yaml.py"


def run(inventory: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(inventory)], capture_output=True, text=True, check=False)


def site(tmp_path: Path, group_vars: str = "vgpu_memory_unit_mib: 256\n", host_vars: str = "{}\n") -> Path:
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    gpu_nodes:\n      hosts:\n        gpu-1:\n")
    for folder, text in (("group_vars/all.yml", group_vars), ("host_vars/gpu-1/main.yml", host_vars)):
        (tmp_path / folder).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / folder).write_text(text)
    return tmp_path / "hosts.yml"


def test_a_yaml_mistake_in_group_vars_is_named_with_its_file_and_line(tmp_path):
    inventory = site(tmp_path, group_vars="vgpu_memory_unit_mib: 256\nvgpu_sample_app_quota: [3GiB\nfoo: 1\n")
    proc = run(inventory)
    assert proc.returncode == 1
    assert "The inventory has 1 YAML problem(s); nothing was changed." in proc.stderr
    assert f"- {tmp_path / 'group_vars' / 'all.yml'}:3:" in proc.stderr
    assert "while parsing a flow sequence" in proc.stderr and "fix that line" in proc.stderr


def test_every_file_with_a_mistake_is_named_in_one_report(tmp_path):
    inventory = site(tmp_path, group_vars="a: b: c\n", host_vars="vgpu_mps_enabled: true\n  bad: indent\n")
    proc = run(inventory)
    assert "The inventory has 2 YAML problem(s)" in proc.stderr
    assert f"{tmp_path / 'group_vars' / 'all.yml'}:1:5: not valid YAML" in proc.stderr
    assert f"{tmp_path / 'host_vars' / 'gpu-1' / 'main.yml'}:2:" in proc.stderr


def test_valid_yaml_with_ansible_s_tags_passes_silently(tmp_path):
    vault = "secret: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\nraw: !unsafe '{{ x }}'\n"
    proc = run(site(tmp_path, group_vars=vault))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert run(ROOT / "inventory" / "example" / "hosts.yml").returncode == 0
