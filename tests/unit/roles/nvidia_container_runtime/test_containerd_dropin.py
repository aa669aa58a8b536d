"""The nvidia runtime's drop-in for containerd 2 (roles/nvidia_container_runtime/templates/99-nvidia.toml.j2),
rendered by Ansible itself. containerd 2 reports its default runtime's cgroup driver to kubelet, which
then uses it: a drop-in that always said SystemdCgroup = true made kubelet on a cgroupfs node (no
systemd: kubeadm_cgroup_driver cgroupfs) fail with "systemd not running on this host"
(tests/gpu/kubelet, VGPU_KUBELET_SCENARIO=dra, containerd 2.4)."""

import sys
from pathlib import Path

import pytest
import yaml
from role_render import ROOT, role_play, run_playbook

ROLE = ROOT / "roles" / "nvidia_container_runtime"


def render(tmp_path: Path, extra: dict) -> dict:
    tomllib = pytest.importorskip("tomllib")
    dropin = {"src": f"{ROLE}/templates/99-nvidia.toml.j2", "dest": f"{tmp_path}/99-nvidia.toml", "mode": "0644"}
    (tmp_path / "play.yml").write_text(role_play("nvidia_container_runtime", [{"ansible.builtin.template": dropin}]))
    (tmp_path / "extra.yml").write_text(yaml.safe_dump({"ansible_python_interpreter": sys.executable, **extra}))
    run_playbook(str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'extra.yml'}")
    runtime = tomllib.loads((tmp_path / "99-nvidia.toml").read_text())["plugins"]["io.containerd.cri.v1.runtime"]
    return runtime["containerd"]["runtimes"]["nvidia"]["options"]


def test_the_drop_in_uses_systemd_cgroups_by_default(tmp_path):
    assert render(tmp_path, {})["SystemdCgroup"] is True


def test_a_cgroupfs_node_gets_a_cgroupfs_nvidia_runtime(tmp_path):
    assert render(tmp_path, {"nvidia_container_runtime_cgroup_driver": "cgroupfs"})["SystemdCgroup"] is False


def test_the_kubeadm_role_hands_its_cgroup_driver_to_the_drop_in(tmp_path):
    """kubeadm_cgroup_driver is the node's one choice: the kubeadm role passes it on when it runs the
    runtime's containerd tasks, so containerd's runc and the nvidia runtime agree with kubelet."""
    prepare = yaml.safe_load((ROOT / "roles" / "kubeadm" / "tasks" / "prepare.yml").read_text())
    step = next(t for t in prepare if t.get("ansible.builtin.include_role", {}).get("tasks_from") == "containerd.yml")
    passed = step["vars"]["nvidia_container_runtime_cgroup_driver"]
    assert (
        render(tmp_path, {"nvidia_container_runtime_cgroup_driver": passed, "kubeadm_cgroup_driver": "cgroupfs"})[
            "SystemdCgroup"
        ]
        is False
    )
