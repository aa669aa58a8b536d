"""Issue 41: the mistakes preflight names before anything changes, on a real run of the playbooks.

site.yml and stack.yml run for real (ansible-playbook, check mode, no mirror probe) on this machine
(Debian 12, no GPU) as several hosts over the local connection; a host that cannot be reached is an
SSH address where nothing listens (127.0.0.1 port 1: refused at once).
"""

import sys

from role_render import ROOT
from test_preflight_platform import failed_check_run, stand_in

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
UNREACHABLE = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}


def run(tmp_path, playbook, groups, path_prefix="", **settings):
    """Run ``playbook`` in check mode on ``groups`` (group -> {host: vars}); returns its failure."""
    inventory = {"all": {"children": {g: {"hosts": h} for g, h in groups.items()}}}
    failure = failed_check_run(tmp_path, inventory, ROOT / "playbooks" / playbook, path_prefix, **settings)
    return " ".join(failure.split())  # one line, whatever the output's wrapping


def test_an_unreachable_host_is_named_in_one_report_with_the_other_hosts_problems(tmp_path):
    """Item 5: an unreachable host stopped the run with Ansible's message alone, hiding what was wrong
    with the hosts that answered."""
    out = run(
        tmp_path,
        "site.yml",
        {"k8s_control_plane": {"cp": LOCAL}, "gpu_nodes": {"gpu-1": UNREACHABLE, "gpu-2": LOCAL}},
    )
    assert "Preflight found 2 problem(s); nothing was changed." in out
    assert "- unreachable at 127.0.0.1: " in out and "Connection refused" in out
    assert "check that the host is up and that its address (ansible_host), user (ansible_user) and SSH key" in out
    assert "or remove it from the inventory [gpu-1]" in out
    assert "- no NVIDIA GPU found (no PCI device with vendor 0x10de, no /dev/nvidia<N>)" in out
    assert "move this host out of the gpu_nodes group [gpu-2]" in out


def test_a_gpu_node_that_never_joined_the_cluster_is_refused_before_the_node_roles(tmp_path):
    """Item 2: `make stack` on a cluster built by others found a gpu_nodes host that never joined only
    after the node roles ran and the node labels' wait timed out (300 s). kubectl is a stand-in (no
    cluster here) answering the node list of a cluster without this host."""
    kubeconfig = tmp_path / "admin.kubeconfig"
    kubeconfig.write_text("{}\n")
    tools = stand_in(
        tmp_path / "bin",
        "kubectl",
        "node/cp\nnode/edge-gpu-1",
        ("--kubeconfig", str(kubeconfig), "get", "nodes", "--output", "name"),
    )
    out = run(
        tmp_path,
        "stack.yml",
        {"k8s_control_plane": {"cp": LOCAL}, "gpu_nodes": {"gpu-2": {**LOCAL, "vgpu_stack_node_name": "gpu-2"}}},
        path_prefix=tools,
        vgpu_kubernetes_flavour="kubeadm",
        vgpu_kubeconfig=str(kubeconfig),
    )
    assert "nothing was changed" in out
    assert (
        "- gpu-2: gpu_nodes host whose node gpu-2 is not in the running cluster (kubectl get nodes on cp) (known: cp, "
        "edge-gpu-1); stack.yml adds the GPU stack to nodes that already joined: join it first"
    ) in out


def fake_gpu(tmp_path, device_id):
    """A PCI device folder as sysfs shows an NVIDIA GPU, and a stand-in grep that finds it where
    preflight looks for vendor 0x10de (no GPU here); every other grep is the real one."""
    device = tmp_path / "pci" / "0000:01:00.0"
    device.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", device_id)):
        (device / name).write_text(value + "\n")
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    grep = tools / "grep"
    grep.write_text(
        f'#!/bin/sh\nif [ "$1" = "-lx" ] && [ "$2" = "0x10de" ]; then echo "{device}/vendor"; exit 0; fi\n'
        'exec /usr/bin/grep "$@"\n'
    )
    grep.chmod(0o755)
    return str(tools)


def test_a_unit_larger_than_the_gpu_its_pci_id_names_is_refused_before_any_driver(tmp_path):
    """Item 4: without vgpu_gpu_memory_mib and without a driver, a unit larger than any GPU passed and
    was found at the end of site.yml, with the advice "lower the quota to 0 MiB". The GPU is an A10
    by its PCI ID (24 GB)."""
    out = run(
        tmp_path,
        "site.yml",
        {"k8s_control_plane": {"cp": LOCAL}, "gpu_nodes": {"gpu-1": LOCAL}},
        path_prefix=fake_gpu(tmp_path, "0x2236"),
        vgpu_memory_unit_mib="32GiB",
        vgpu_sample_app_quota="32GiB",
    )
    assert (
        "- vgpu_memory_unit_mib: 32768 MiB is more than any GPU of the cluster offers: the largest, gpu-1's GPU 0 "
        "(A10 by its PCI ID, 24576 MiB nominal) with 24576 MiB less 0 MiB reserved (vgpu_reserved_memory_mib), has "
        "room for no unit, so no pod could get GPU memory; lower vgpu_memory_unit_mib to 24576 MiB or less"
    ) in out
    assert "0 MiB or less" not in out


def test_a_quota_larger_than_the_gpu_its_pci_id_names_is_refused_before_any_driver(tmp_path):
    out = run(
        tmp_path,
        "site.yml",
        {"k8s_control_plane": {"cp": LOCAL}, "gpu_nodes": {"gpu-1": LOCAL}},
        path_prefix=fake_gpu(tmp_path, "0x2236"),
        vgpu_sample_app_quota="40000MiB",
    )
    assert (
        "- vgpu_sample_app_quota: 40000 MiB is more than any GPU of the cluster offers: the largest, gpu-1's GPU 0 "
        "(A10 by its PCI ID, 24576 MiB nominal) with 24576 MiB, offers 245 units of 100 MiB = 24500 MiB"
    ) in out


def test_a_gpu_of_unknown_size_is_named_as_not_checked(tmp_path):
    """Item 4: where neither the inventory, a driver nor the PCI ID gives a GPU's memory, the run says
    what it could not check. gpu-2 cannot be reached, so the run stops in preflight."""
    out = run(
        tmp_path,
        "site.yml",
        {"k8s_control_plane": {"cp": LOCAL}, "gpu_nodes": {"gpu-1": LOCAL, "gpu-2": UNREACHABLE}},
        path_prefix=fake_gpu(tmp_path, "0x2001"),
        vgpu_sample_app_quota="40000MiB",
    )
    assert (
        "gpu-1: could not check vgpu_memory_unit_mib and vgpu_sample_app_quota against its GPU(s) 10de:2001: no driver "
        "runs there yet, vgpu_gpu_memory_mib does not state their memory"
    ) in out
    assert "Preflight found 1 problem(s); nothing was changed." in out
