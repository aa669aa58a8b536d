"""roles/vgpu's settings check as a play sees it: one short line per problem, before anything runs.

Runs the role for real (ansible-playbook on localhost) with settings as an inventory gives them, and
playbooks/check.yml (`make check`) against inventories whose hosts cannot be reached.
"""

import os
import subprocess
import sys
from pathlib import Path

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
    assert "vgpu_kubernetes_flavor: not a variable of vgpu.isolation; did you mean vgpu_kubernetes_flavour?" in out
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


# --- playbooks/check.yml: the check before anything changes, no host reachable (issue 25) -------
# 192.0.2.0/24 is TEST-NET-1 (RFC 5737): no host answers there, so any connection attempt would fail.
UNREACHABLE = """
all:
  vars:
    ansible_user: ops
  children:
    k8s_control_plane:
      hosts:
        cp: {ansible_host: 192.0.2.10}
    GPU_GROUP:
      hosts:
        gpu-1: {ansible_host: 192.0.2.21, vgpu_gpu_memory_mib: [23028]}
        gpu-2: {ansible_host: 192.0.2.22}
"""


def check(inventory: str) -> str:
    """`make check INVENTORY=...`: playbooks/check.yml, expected to fail."""
    with pytest.raises(AssertionError) as failed:
        run_playbook("-i", inventory, str(ROOT / "playbooks" / "check.yml"))
    return str(failed.value)


def write_inventory(tmp_path, group="gpu_nodes", group_vars="", gpu_2_vars=""):
    for folder, text in (("group_vars/all.yml", group_vars), ("host_vars/gpu-2.yml", gpu_2_vars)):
        (tmp_path / folder).parent.mkdir(exist_ok=True)
        (tmp_path / folder).write_text(text or "{}\n")
    (tmp_path / "hosts.yml").write_text(UNREACHABLE.replace("GPU_GROUP", group))
    return str(tmp_path / "hosts.yml")


def test_an_inventory_path_that_does_not_exist_stops_the_run_naming_it(tmp_path):
    """Item 2: `make site INVENTORY=inventory/mysite/host.yml` with a wrong path exited 0, every play
    "no hosts matched"."""
    out = check(str(tmp_path / "mysite" / "host.yml"))
    assert f"inventory: {tmp_path / 'mysite' / 'host.yml'} does not exist; give the path of your inventory" in out
    assert "failed=1" in out


def test_a_misspelt_group_is_named_with_the_groups_the_playbooks_expect(tmp_path):
    """Item 2: a group gpu-nodes ran preflight on the control plane only, with a warning."""
    out = check(write_inventory(tmp_path, group="gpu-nodes"))
    assert (
        "inventory: the group gpu_nodes has no host; the playbooks act on the groups k8s_control_plane and "
        "gpu_nodes (inventory/example/hosts.yml shows them); did you mean gpu-nodes? (rename that group to gpu_nodes)"
    ) in out


def test_every_host_s_mistakes_and_the_cluster_wide_ones_come_in_one_report_without_reaching_a_host(tmp_path):
    """Items 5 and 8: with unreachable addresses the settings were never checked (facts came first),
    and mistakes on several hosts were printed once per host, the cluster-wide ones only after a
    second run. Items 4 and 6: the quota no GPU can give, the role variable typos, the other
    flavour's variable, all in the same report."""
    group_vars = "vpgu_mps_enabled: true\nkubeadm_pod_subnet: 10.244.0.0/16\nvgpu_sample_app_quota: 50GiB\n"
    gpu_2_vars = "vgpu_memory_unit_mib: 256\nvgpu_stack_monitoring_label: {release: prom}\n"
    out = check(write_inventory(tmp_path, group_vars=group_vars, gpu_2_vars=gpu_2_vars))
    assert "The settings have 5 problem(s); nothing was changed." in out
    for line in [
        "- vpgu_mps_enabled: not a variable of vgpu.isolation; did you mean vgpu_mps_enabled?",
        "- kubeadm_pod_subnet: a variable of the kubeadm role, but vgpu_kubernetes_flavour is 'k3s', so nothing "
        "reads it",
        "- vgpu_stack_monitoring_label: not a variable of vgpu.isolation; did you mean vgpu_stack_monitoring_labels?",
        "- vgpu_memory_unit_mib differs between hosts (100 MiB on cp, gpu-1; 256 MiB on gpu-2)",
        "- vgpu_sample_app_quota: 51200 MiB is more than any GPU of the cluster offers: the largest, gpu-1's GPU 0 "
        "with 23028 MiB, offers 230 units of 100 MiB = 23000 MiB",
    ]:
        assert line in out, line
    assert "[every host]" in out and "[gpu-2]" in out
    assert len([line for line in out.splitlines() if line.startswith("fatal:")]) == 1, "one report"
    assert "UNREACHABLE" not in out and "unreachable=0" in out, "no host was contacted"


def test_a_valid_inventory_passes_the_check_without_reaching_a_host(tmp_path):
    out = run_playbook(
        "-i",
        write_inventory(tmp_path, group_vars="vgpu_memory_unit_mib: 256\nvgpu_sample_app_quota: 3GiB\n"),
        str(ROOT / "playbooks" / "check.yml"),
    ).stdout
    assert "failed=0" in out and "unreachable=0" in out


def test_an_inventory_of_the_previous_release_passes_with_a_deprecation_naming_each_new_name(tmp_path):
    """Issue 39: an inventory that still sets old names (vgpu_stack's aliases, kube-scheduler's wiring
    before issue 26) passes the check for one release; the run names each old name's new one."""
    out = run(tmp_path, "vgpu_stack_unit_mib: 200\nvgpu_stack_extender_port: 32701\nvgpu_stack_version: 0.1.0\n", True)
    out = " ".join(out.split())  # the YAML callback folds a long line
    assert "failed=0" in out
    assert "vgpu_stack_unit_mib: deprecated, renamed vgpu_memory_unit_mib: set vgpu_memory_unit_mib instead" in out
    assert "vgpu_stack_extender_port: deprecated, renamed vgpu_extender_port" in out
    assert "vgpu_stack_version: deprecated, no longer read" in out


def test_an_old_name_beside_its_new_one_with_another_value_is_refused(tmp_path):
    out = run(tmp_path, "vgpu_stack_unit_mib: 200\nvgpu_memory_unit_mib: 100\n", expect_ok=False)
    assert "The settings have 1 problem(s); nothing was changed." in out
    assert (
        "vgpu_stack_unit_mib and vgpu_memory_unit_mib are one setting (vgpu_stack_unit_mib is its old name) set to "
        "different values, 200 MiB and 100 MiB; remove vgpu_stack_unit_mib"
    ) in out


@pytest.mark.parametrize("playbook", ["check.yml", "site.yml"])
def test_a_run_limited_with_tags_is_checked_all_the_same(tmp_path, playbook):
    """Issue 41: the check plays are tagged `always`; `--tags x` ran none of them."""
    inventory = write_inventory(tmp_path, group_vars="vpgu_mps_enabled: true\n")
    with pytest.raises(AssertionError) as failed:
        run_playbook("-i", inventory, str(ROOT / "playbooks" / playbook), "--tags", "x")
    out = str(failed.value)
    assert "vpgu_mps_enabled: not a variable of vgpu.isolation; did you mean vgpu_mps_enabled?" in out
    assert "UNREACHABLE" not in out, "the check came first"


def test_a_check_that_passes_ends_with_a_one_line_verdict(tmp_path):
    out = run_playbook("-i", write_inventory(tmp_path), str(ROOT / "playbooks" / "check.yml"), "--tags", "x").stdout
    assert "check: 3 hosts, no problems found; nothing was changed" in out


# --- issue 41 item 2: the cluster's shape, before any host is contacted ------------------------
def shaped_inventory(tmp_path, control_planes, flavour, extra_host="", group_vars=""):
    hosts = "".join(f"        {host}: {{ansible_host: 192.0.2.{10 + i}}}\n" for i, host in enumerate(control_planes))
    text = UNREACHABLE.replace("GPU_GROUP", "gpu_nodes").replace("        cp: {ansible_host: 192.0.2.10}\n", hosts)
    if extra_host:
        text += f"    storage:\n      hosts:\n        {extra_host}: {{ansible_host: 192.0.2.99}}\n"
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text(f"vgpu_kubernetes_flavour: {flavour}\n{group_vars}")
    (tmp_path / "hosts.yml").write_text(text)
    return str(tmp_path / "hosts.yml")


def test_two_kubeadm_control_planes_without_an_endpoint_are_refused_before_any_host_is_contacted(tmp_path):
    out = " ".join(check(shaped_inventory(tmp_path, ["cp-1", "cp-2"], "kubeadm")).split())
    assert "The inventory has 2 problem(s); nothing was changed." in out
    assert "- k8s_control_plane: 2 hosts with vgpu_kubernetes_flavour kubeadm; kubeadm runs a stacked etcd" in out
    assert "- kubeadm_control_plane_endpoint: empty with 2 control planes" in out
    assert "unreachable=0" in out


def test_k3s_with_two_servers_and_embedded_etcd_is_refused_by_the_check(tmp_path):
    inventory = shaped_inventory(tmp_path, ["s-1", "s-2"], "k3s", group_vars="k3s_server_url: https://api:6443\n")
    out = " ".join(check(inventory).split())
    assert "The inventory has 1 problem(s); nothing was changed." in out
    assert "K3s with several servers runs its embedded etcd" in out


def test_a_host_in_no_group_of_the_playbooks_is_refused_by_the_check(tmp_path):
    out = " ".join(check(shaped_inventory(tmp_path, ["cp"], "k3s", extra_host="nas-1")).split())
    assert "- nas-1: in neither k8s_control_plane nor gpu_nodes, so no playbook acts on it" in out


def test_three_kubeadm_control_planes_behind_one_endpoint_pass_the_check(tmp_path):
    inventory = shaped_inventory(
        tmp_path, ["cp-1", "cp-2", "cp-3"], "kubeadm", group_vars="kubeadm_control_plane_endpoint: api:6443\n"
    )
    out = run_playbook("-i", inventory, str(ROOT / "playbooks" / "check.yml")).stdout
    assert "failed=0" in out and "unreachable=0" in out


# --- issue 41 item 6: the collections vgpu.isolation depends on ---------------------------------
def test_missing_dependency_collections_are_named_with_the_install_command_before_anything_changes(tmp_path):
    """A tarball installed with --no-deps ran until the first kubernetes.core task, after the nodes
    had changed. Here Ansible finds vgpu.isolation alone (no .collections, no sys.path scan)."""
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / "build" / "pytest-collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_LOCALHOST_WARNING="false",
    )
    binary = Path(sys.executable).with_name("ansible-playbook")
    inventory = write_inventory(tmp_path)
    proc = subprocess.run(
        [str(binary), "-i", inventory, str(ROOT / "playbooks" / "check.yml")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "The collections have 4 problem(s); nothing was changed." in out
    assert (
        "- collection kubernetes.core (>=6.0.0) is not installed, and vgpu.isolation needs it; install it before the "
        "run: ansible-galaxy collection install 'kubernetes.core:>=6.0.0'"
    ) in out
    for name in ("ansible.posix", "community.crypto", "community.general"):
        assert f"- collection {name} (" in out


# --- issue 41 item 3: settings under other names -------------------------------------------------
def test_a_role_variable_that_shadows_a_checked_setting_is_refused_naming_the_setting(tmp_path):
    """nvidia_driver_branch: 999 in the inventory passed the check (vgpu_driver_branch kept its valid
    default) and reached the driver role."""
    out = " ".join(check(write_inventory(tmp_path, group_vars="nvidia_driver_branch: 999\n")).split())
    assert "The settings have 1 problem(s); nothing was changed." in out
    assert (
        "- nvidia_driver_branch: the nvidia_driver role's own name for vgpu_driver_branch; set there, the role would "
        "act on a value the settings check never saw while the other roles and the components read "
        "vgpu_driver_branch; set vgpu_driver_branch instead [every host]"
    ) in out


def test_a_setting_the_chosen_flavour_never_reads_is_named(tmp_path):
    group_vars = "vgpu_kubernetes_flavour: kubeadm\nvgpu_k3s_version: v1.36.3+k3s1\n"
    out = " ".join(check(write_inventory(tmp_path, group_vars=group_vars)).split())
    assert (
        "- vgpu_k3s_version: set, but vgpu_kubernetes_flavour is 'kubeadm', which never reads it (only k3s does); "
        "remove it, or set vgpu_kubernetes_flavour to the cluster's kind"
    ) in out


# --- issue 41 item 7: a kubespray inventory as it is ----------------------------------------------
KUBESPRAY = """
all:
  vars:
    ansible_user: ops
  hosts:
    node1: {ansible_host: 192.0.2.11}
    node2: {ansible_host: 192.0.2.12}
    node3: {ansible_host: 192.0.2.13}
    etcd4: {ansible_host: 192.0.2.14}
  children:
    kube_control_plane:
      hosts:
        node1:
    kube_node:
      hosts:
        node2:
        node3:
    etcd:
      hosts:
        node1:
        etcd4:
    k8s_cluster:
      children:
        kube_control_plane:
        kube_node:
"""


def kubespray_inventory(tmp_path, node3_vars="{}\n"):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("vgpu_kubernetes_flavour: kubeadm\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "node3.yml").write_text(node3_vars)
    (tmp_path / "hosts.yml").write_text(KUBESPRAY)
    return str(tmp_path / "hosts.yml")


def test_a_kubespray_inventory_as_it_is_passes_the_check_with_its_groups_mapped(tmp_path):
    """kube_control_plane is taken for k8s_control_plane, kube_node for gpu_nodes; kubespray's etcd
    host is no host "in no group", and its even etcd group is kubespray's own."""
    out = run_playbook("-i", kubespray_inventory(tmp_path), str(ROOT / "playbooks" / "check.yml")).stdout
    assert "failed=0" in out and "unreachable=0" in out
    settings_play = out.split("PLAY [Check the settings of every host]", 1)[1]
    for host in ("node1", "node2", "node3"):
        assert f"[{host}]" in settings_play
    assert "[etcd4]" not in settings_play


def test_a_mistake_on_a_kubespray_worker_is_named_on_that_host(tmp_path):
    out = " ".join(check(kubespray_inventory(tmp_path, node3_vars="vgpu_mps_enabled: maybe\n")).split())
    assert "- vgpu_mps_enabled: 'maybe' is not a boolean; expected true or false [node3]" in out
