"""roles/vgpu's settings check as a play sees it: one short line per problem, before anything runs.

Runs the role for real (ansible-playbook on localhost) with settings as an inventory gives them.
"""

import pytest
from role_render import run_playbook

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - vgpu.isolation.vgpu
"""


def run(tmp_path, group_vars: str, expect_ok: bool):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(group_vars)
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    localhost: {}\n")
    (tmp_path / "play.yml").write_text(PLAY)
    args = ("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"))
    if expect_ok:
        return run_playbook(*args).stdout
    with pytest.raises(AssertionError) as failed:
        run_playbook(*args)
    return str(failed.value)


def test_typos_types_and_unquoted_versions_fail_in_a_few_lines(tmp_path):
    out = run(
        tmp_path,
        "vgpu_kubernetes_flavor: kubeadm\nvgpu_kubernetes_version: 1.30\nvgpu_mps_enabled: maybe\n",
        expect_ok=False,
    )
    assert "The settings have 3 problem(s); nothing was changed." in out
    assert "vgpu_kubernetes_flavor: not a vgpu.isolation setting; did you mean vgpu_kubernetes_flavour?" in out
    assert "vgpu_kubernetes_version: 1.3 is a number, not a string" in out
    assert "vgpu_mps_enabled: 'maybe' is not a boolean" in out
    assert "argument_spec_data" not in out, "no argument-spec dump"
    assert len(out.splitlines()) < 40, out


def test_memory_sizes_with_suffixes_pass(tmp_path):
    out = run(
        tmp_path,
        'vgpu_reserved_memory_mib: "512MiB"\nvgpu_memory_unit_mib: "256Mi"\nvgpu_sample_app_quota: "3Gi"\n',
        expect_ok=True,
    )
    assert "failed=0" in out
