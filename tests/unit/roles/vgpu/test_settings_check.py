"""roles/vgpu's settings check as a play sees it: one short line per problem, before anything runs.

Runs the role for real (ansible-playbook on localhost) with settings as an inventory gives them.
"""

import pytest
from role_render import ROOT, run_playbook

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


CLUSTER_PLAY = """
- hosts: k8s_control_plane:gpu_nodes
  gather_facts: false
  roles:
    - vgpu.isolation.vgpu
"""


def test_a_cluster_wide_setting_set_for_the_gpu_nodes_only_is_refused_once(tmp_path):
    """Issue 14 item 1: the unit set in group_vars/gpu_nodes leaves the control plane, which renders
    the components' ConfigMap, on the default; the run stops before anything changes."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text("vgpu_memory_unit_mib: 200\n")
    (tmp_path / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n  children:\n"
        "    k8s_control_plane:\n      hosts:\n        cp: {}\n"
        "    gpu_nodes:\n      hosts:\n        gpu-1: {}\n        gpu-2: {}\n"
    )
    (tmp_path / "play.yml").write_text(CLUSTER_PLAY)
    with pytest.raises(AssertionError) as failed:
        run_playbook("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"))
    out = str(failed.value)
    assert "vgpu_memory_unit_mib differs between hosts (100 MiB on cp; 200 MiB on gpu-1, gpu-2)" in out
    fatal = [line for line in out.splitlines() if line.startswith("fatal:")]
    assert len(fatal) == 1, "reported once, not once per host"


def test_the_example_inventory_passes_the_settings_check():
    """inventory/example as shipped: every setting valid, the cluster-wide ones equal on every host."""
    out = run_playbook(
        "-i",
        str(ROOT / "inventory" / "example"),
        "-e",
        "ansible_connection=local",
        str(ROOT / "tests" / "unit" / "roles" / "vgpu" / "settings_play.yml"),
    ).stdout
    assert "failed=" in out and "failed=1" not in out
