"""Issue 41: the mistakes preflight names before anything changes, on a real run of the playbooks.

site.yml and stack.yml run for real (ansible-playbook, check mode, no mirror probe) on this machine
(Debian 12, no GPU) as several hosts over the local connection; a host that cannot be reached is an
SSH address where nothing listens (127.0.0.1 port 1: refused at once).
"""

import json
import sys

import pytest
from role_render import ROOT, run_playbook
from test_preflight_platform import stand_in

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
UNREACHABLE = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1}


def run(tmp_path, playbook, groups, path_prefix="", **settings):
    """Run ``playbook`` in check mode on ``groups`` (group -> {host: vars}); returns its failure."""
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"children": {g: {"hosts": h} for g, h in groups.items()}}}))
    image = tmp_path / "vgpu-components-0.1.0.tar"
    image.write_bytes(b"")
    extra = {"preflight_check_network": False, "vgpu_component_image_tarball": str(image), **settings}
    with pytest.raises(AssertionError) as failed:
        run_playbook(
            "--check",
            "-i",
            str(tmp_path / "hosts.yml"),
            str(ROOT / "playbooks" / playbook),
            "-e",
            json.dumps(extra),
            path_prefix=path_prefix,
        )
    return " ".join(str(failed.value).split())  # the YAML callback folds long lines


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
        tmp_path / "bin", "kubectl", "node/cp\nnode/edge-gpu-1", ("--kubeconfig", str(kubeconfig), "get", "nodes", "--output", "name")
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
