"""The K3s role's config.yaml (roles/k3s/templates/config.yaml.j2), rendered by Ansible itself: with
vgpu_gpu_node_taint the servers' kube-apiserver gives pods that request GPU memory the toleration of
the GPU nodes' taint (ExtendedResourceToleration), before any kube-apiserver-arg of the operator."""

import sys
from pathlib import Path

import yaml
from role_render import ROOT, role_play, run_playbook

ROLE = ROOT / "roles" / "k3s"
PLUGINS = "enable-admission-plugins=NodeRestriction,ExtendedResourceToleration"

RENDER = {
    "name": "Render config.yaml as the role does",
    "ansible.builtin.template": {
        "src": f"{ROLE}/templates/config.yaml.j2",
        "dest": "{{ out }}/{{ inventory_hostname }}.yaml",
        "mode": "0644",
    },
    "delegate_to": "localhost",
}
HOSTS = """
all:
  vars: {{ansible_python_interpreter: {python}}}
  children:
    k8s_control_plane: {{hosts: {{server-1: {{ansible_host: 10.0.0.10}}}}}}
    gpu_nodes: {{hosts: {{gpu-1: {{}}}}}}
"""


def render(tmp_path: Path, extra: dict) -> dict:
    (tmp_path / "play.yml").write_text(role_play("k3s", [{**RENDER, "vars": {"out": str(tmp_path)}}], hosts="all"))
    (tmp_path / "hosts.yml").write_text(HOSTS.format(python=sys.executable))
    (tmp_path / "extra.yml").write_text(yaml.safe_dump({"ansible_facts": {"nodename": "node"}, **extra}))
    run_playbook("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'extra.yml'}")
    return {host: yaml.safe_load((tmp_path / f"{host}.yaml").read_text()) for host in ("server-1", "gpu-1")}


def test_the_gpu_node_taint_turns_on_extended_resource_toleration_on_the_servers(tmp_path):
    config = render(tmp_path, {"vgpu_gpu_node_taint": True, "k3s_server_config": {"kube-apiserver-arg": ["v=2"]}})
    assert config["server-1"]["kube-apiserver-arg"] == [PLUGINS, "v=2"]
    assert "kube-apiserver-arg" not in config["gpu-1"]  # agents run no kube-apiserver


def test_without_the_taint_the_servers_keep_k3s_flags(tmp_path):
    config = render(tmp_path, {"k3s_server_config": {"kube-apiserver-arg": ["v=2"]}})
    assert config["server-1"]["kube-apiserver-arg"] == ["v=2"]
