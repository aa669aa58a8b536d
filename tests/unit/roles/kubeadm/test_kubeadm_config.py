"""The kubeadm role's configuration: what `kubeadm init` gets, and how a live ClusterConfiguration
of an existing cluster gains (and later loses) the scheduler flag and volume without losing any
other setting. Rendered by Ansible itself (ansible-playbook on localhost); kubeadm cannot run here.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.module_utils.contract import SETTINGS
from role_render import ROOT, role_play, run_playbook

ROLE = ROOT / "roles" / "kubeadm"
CONFIG = "/etc/kubernetes/vgpu-scheduler-config.yaml"
TLS = "/etc/vgpu/tls"
TLS_VOLUME = {
    "name": "vgpu-scheduler-tls",
    "hostPath": TLS,
    "mountPath": TLS,
    "readOnly": True,
    "pathType": "DirectoryOrCreate",
}

# A ClusterConfiguration as kubeadm 1.31 stores it, with settings of its own to keep.
LIVE_V1BETA4 = """
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.31.4
controlPlaneEndpoint: 10.0.0.10:6443
networking: {podSubnet: 10.244.0.0/16, serviceSubnet: 10.96.0.0/12, dnsDomain: cluster.local}
scheduler:
  extraArgs:
  - {name: bind-address, value: 127.0.0.2}
  - {name: config, value: /etc/old-scheduler.yaml}
  extraVolumes:
  - {name: other, hostPath: /srv/x, mountPath: /srv/x}
"""
LIVE_V1BETA3 = """
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
kubernetesVersion: v1.30.8
scheduler:
  extraArgs: {bind-address: 127.0.0.2}
"""


def config_tasks(out: Path) -> list[dict]:
    """Unmerge the live document, merge, unmerge the merged one, render the init configuration;
    each result kept in ``out`` (live-without.json, with.json, without.json, kubeadm-config.yaml)."""

    def from_role(name: str, tasks_from: str) -> dict:
        return {
            "name": name,
            "ansible.builtin.include_role": {"name": "vgpu.isolation.kubeadm", "tasks_from": tasks_from},
        }

    def keep(name: str, variable: str, file: str) -> dict:
        content = f"{{{{ {variable} | to_json }}}}"
        return {"name": name, "ansible.builtin.copy": {"content": content, "dest": f"{out}/{file}", "mode": "0644"}}

    return [
        from_role("Unmerge the live document as it is", "cluster_config_without_scheduler.yml"),
        keep("Keep it", "kubeadm_plain_cluster_config", "live-without.json"),
        from_role("Merge", "cluster_config_with_scheduler.yml"),
        keep("Keep the merged document", "kubeadm_wanted_cluster_config", "with.json"),
        {
            "name": "Take it as the live document",
            "ansible.builtin.set_fact": {
                "kubeadm_live_cluster_config": {"rc": 0, "stdout": "{{ kubeadm_wanted_cluster_config | to_nice_yaml }}"}
            },
        },
        from_role("Unmerge", "cluster_config_without_scheduler.yml"),
        keep("Keep the restored document", "kubeadm_plain_cluster_config", "without.json"),
        {
            "name": "Render the init configuration",
            "ansible.builtin.template": {
                "src": f"{ROLE}/templates/kubeadm-config.yaml.j2",
                "dest": f"{out}/kubeadm-config.yaml",
                "mode": "0644",
            },
        },
    ]


INVENTORY = """
all:
  children:
    k8s_control_plane:
      hosts:
        localhost:
          ansible_connection: local
          ansible_python_interpreter: "{python}"
          ansible_host: 10.0.0.10
"""


def run(tmp_path, live, extra=None):
    (tmp_path / "play.yml").write_text(role_play("kubeadm", config_tasks(tmp_path), tmp_path / "vars.json"))
    (tmp_path / "hosts.yml").write_text(INVENTORY.replace("{python}", sys.executable))
    variables = {
        "kubeadm_live_cluster_config": {"rc": 0, "stdout": live},
        "ansible_facts": {"nodename": "CP-1", "default_ipv4": {"address": "10.0.0.10"}, "os_family": "Debian"},
    }
    variables.update(extra or {})
    (tmp_path / "vars.json").write_text(json.dumps(variables))
    run_playbook("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"))
    with_scheduler = json.loads((tmp_path / "with.json").read_text())
    without = json.loads((tmp_path / "without.json").read_text())
    init = list(yaml.safe_load_all((tmp_path / "kubeadm-config.yaml").read_text()))
    return with_scheduler, without, init


# kubeadm's ClusterConfiguration after the wiring left it: no scheduler arguments or volumes at all.
UNWIRED = """
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.36.3
controlPlaneEndpoint: 172.31.250.2:6443
networking: {podSubnet: 10.244.0.0/16, serviceSubnet: 10.96.0.0/12, dnsDomain: cluster.local}
scheduler: {}
"""


def test_a_configuration_without_the_wiring_is_left_as_it_is(tmp_path):
    """Found by make e2e-node: a second uninstall stored the ClusterConfiguration again and re-rendered
    kube-scheduler, because the unmerge added empty extraArgs and extraVolumes."""
    run(tmp_path, UNWIRED)
    assert json.loads((tmp_path / "live-without.json").read_text()) == yaml.safe_load(UNWIRED)


@pytest.fixture(scope="module")
def v1beta4(tmp_path_factory):
    return run(tmp_path_factory.mktemp("v1beta4"), LIVE_V1BETA4)


def test_existing_v1beta4_cluster_gains_the_flag_once_and_keeps_its_settings(v1beta4):
    with_scheduler, _without, _init = v1beta4
    args = with_scheduler["scheduler"]["extraArgs"]
    assert args == [{"name": "bind-address", "value": "127.0.0.2"}, {"name": "config", "value": CONFIG}]
    assert with_scheduler["scheduler"]["extraVolumes"] == [
        {"name": "other", "hostPath": "/srv/x", "mountPath": "/srv/x"},
        {
            "name": "vgpu-scheduler-config",
            "hostPath": CONFIG,
            "mountPath": CONFIG,
            "readOnly": True,
            "pathType": "File",
        },
        TLS_VOLUME,
    ]
    assert with_scheduler["controlPlaneEndpoint"] == "10.0.0.10:6443"
    assert with_scheduler["networking"]["dnsDomain"] == "cluster.local"


def test_uninstall_takes_out_exactly_what_was_added(v1beta4):
    _with, without, _init = v1beta4
    assert without["scheduler"]["extraArgs"] == [{"name": "bind-address", "value": "127.0.0.2"}]
    assert without["scheduler"]["extraVolumes"] == [{"name": "other", "hostPath": "/srv/x", "mountPath": "/srv/x"}]


def test_v1beta3_keeps_the_map_form(tmp_path):
    with_scheduler, without, _init = run(tmp_path, LIVE_V1BETA3)
    assert with_scheduler["scheduler"]["extraArgs"] == {"bind-address": "127.0.0.2", "config": CONFIG}
    assert without["scheduler"]["extraArgs"] == {"bind-address": "127.0.0.2"}


def test_init_configuration_mounts_the_scheduler_configuration(v1beta4):
    _with, _without, init = v1beta4
    kinds = [doc["kind"] for doc in init]
    assert kinds == ["InitConfiguration", "ClusterConfiguration", "KubeletConfiguration"]
    init_config, cluster, kubelet = init
    assert init_config["apiVersion"] == cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4"
    assert init_config["nodeRegistration"]["name"] == "cp-1"
    assert init_config["localAPIEndpoint"] == {"advertiseAddress": "10.0.0.10"}
    assert cluster["kubernetesVersion"] == "v1.36.3"
    assert cluster["controlPlaneEndpoint"] == "10.0.0.10:6443"
    assert cluster["scheduler"]["extraArgs"] == [{"name": "config", "value": CONFIG}]
    volume, tls = cluster["scheduler"]["extraVolumes"]
    assert (volume["hostPath"], volume["mountPath"], volume["readOnly"], volume["pathType"]) == (
        CONFIG,
        CONFIG,
        True,
        "File",
    )
    assert tls == TLS_VOLUME, "kube-scheduler reads the extender's certificates (vgpu_extender_tls_dir)"
    assert kubelet["cgroupDriver"] == "systemd"


def test_older_kubernetes_gets_v1beta3_and_the_map_form(tmp_path):
    _with, _without, init = run(tmp_path, LIVE_V1BETA4, {"vgpu_kubernetes_version": "1.30.8"})
    cluster = init[1]
    assert cluster["apiVersion"] == "kubeadm.k8s.io/v1beta3"
    assert cluster["scheduler"]["extraArgs"] == {"config": CONFIG}


def containerd_play(out: Path) -> str:
    """Every host's containerd configuration as the role renders it, into ``out``/<host>.toml."""
    render = {
        "name": "Render containerd's configuration as the role does",
        "ansible.builtin.template": {
            "src": f"{ROLE}/templates/containerd-config.toml.j2",
            "dest": f"{out}/{{{{ inventory_hostname }}}}.toml",
            "mode": "0644",
        },
        "delegate_to": "localhost",
    }
    return role_play("kubeadm", [render], hosts="all")


# `containerd --version` as the role registers it: the bundle's containerd 2 and Debian 12's 1.6.
CONTAINERD_2 = {"stdout": "containerd github.com/containerd/containerd/v2 v2.4.2 4a6a2a3", "rc": 0}
CONTAINERD_1 = {"stdout": "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", "rc": 0}
CONTAINERD_HOSTS = """
all:
  vars: {{ansible_python_interpreter: {python}}}
  children:
    k8s_control_plane: {{hosts: {{cp-1: {{}}}}}}
    gpu_nodes: {{hosts: {{gpu-1: {{}}}}}}
"""


def test_gpu_nodes_get_the_nvidia_runtime_in_containerd_and_the_control_plane_does_not(tmp_path):
    tomllib = pytest.importorskip("tomllib")
    (tmp_path / "play.yml").write_text(containerd_play(tmp_path))
    (tmp_path / "hosts.yml").write_text(CONTAINERD_HOSTS.format(python=sys.executable))
    facts = json.dumps({"ansible_facts": {"os_family": "Debian"}, "kubeadm_containerd_version": CONTAINERD_2})
    run_playbook("-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), "-e", facts)
    runtimes = {}
    for host in ("cp-1", "gpu-1"):
        config = tomllib.loads((tmp_path / f"{host}.toml").read_text())
        assert config["imports"] == ["/etc/containerd/conf.d/*.toml"]
        runtimes[host] = config["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert set(runtimes["cp-1"]) == {"runc"}
    assert runtimes["gpu-1"]["nvidia"]["options"] == {
        "BinaryName": "/usr/bin/nvidia-container-runtime",
        "SystemdCgroup": True,
    }
    assert runtimes["gpu-1"]["runc"]["options"]["SystemdCgroup"] is True
    # nvidia is the GPU node's default runtime (vgpu_nvidia_runtime_default), runc the others'.
    defaults = {h: tomllib.loads((tmp_path / f"{h}.toml").read_text()) for h in ("cp-1", "gpu-1")}
    cri = {h: c["plugins"]["io.containerd.grpc.v1.cri"] for h, c in defaults.items()}
    assert cri["gpu-1"]["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["cp-1"]["containerd"]["default_runtime_name"] == "runc"
    assert cri["gpu-1"]["sandbox_image"] == "registry.k8s.io/pause:3.10.2"
    assert cri["gpu-1"]["cni"]["bin_dir"] == "/usr/lib/cni"


def test_on_containerd_1_a_drop_in_left_by_nvidia_ctk_cannot_shadow_the_roles_settings(tmp_path):
    """containerd 1.x replaces config.toml's whole CRI section with an imported one (containerd
    issue 5837): with a drop-in as `nvidia-ctk runtime configure` writes it (NVIDIA's install guide;
    the runtime role on a host that had containerd before the cluster), imported, containerd ran
    with its own pause image (not in the offline bundle) and cgroupfs. Debian's containerd judges."""
    containerd = shutil.which("containerd")
    assert containerd, "this test runs Debian's containerd 1.x: make host-packages installs it"
    dropins = tmp_path / "conf.d"
    dropins.mkdir()
    (dropins / "99-nvidia.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        '  runtime_type = "io.containerd.runc.v2"\n'
    )
    (tmp_path / "play.yml").write_text(containerd_play(tmp_path))
    (tmp_path / "hosts.yml").write_text(CONTAINERD_HOSTS.format(python=sys.executable))
    facts = {"ansible_facts": {"os_family": "Debian"}, "kubeadm_containerd_dropin_dir": str(dropins)}
    run_playbook(
        "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), "-l", "gpu-1",
        "-e", json.dumps({**facts, "kubeadm_containerd_version": CONTAINERD_1}),
    )  # fmt: skip
    merged = subprocess.run(
        [containerd, "--config", str(tmp_path / "gpu-1.toml"), "config", "dump"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.2"' in merged
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in merged
    assert merged.count("SystemdCgroup = true") == 2  # runc and nvidia
    # containerd 2 merges key by key: there the drop-ins are imported (the runtime role's own).
    run_playbook(
        "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"), "-l", "gpu-1",
        "-e", json.dumps({**facts, "kubeadm_containerd_version": CONTAINERD_2}),
    )  # fmt: skip
    assert f'imports = ["{dropins}/*.toml"]' in (tmp_path / "gpu-1.toml").read_text()


def test_the_mounted_certificate_folder_is_the_one_the_extender_tls_tasks_fill():
    kubeadm = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert SETTINGS["vgpu_extender_tls_dir"]["default"] == TLS
    assert kubeadm["kubeadm_scheduler_tls_dir"] == "{{ vgpu_extender_tls_dir }}"


def test_dra_scheduling_leaves_kube_scheduler_as_it_comes(tmp_path):
    """vgpu_scheduling dra: no --config flag and no volume (kube-scheduler allocates claims alone)."""
    _with, _without, init = run(tmp_path, UNWIRED, {"vgpu_scheduling": "dra", "vgpu_kubernetes_flavour": "kubeadm"})
    cluster = init[1]
    assert cluster["scheduler"] == {}
    assert cluster["kubernetesVersion"] == "v1.36.3"


def test_the_gpu_node_taint_turns_on_extended_resource_toleration(tmp_path):
    """vgpu_gpu_node_taint: kube-apiserver gives every pod that requests GPU memory the toleration of
    the GPU nodes' taint (ExtendedResourceToleration), and keeps kubeadm's own NodeRestriction."""
    _with, _without, init = run(tmp_path, UNWIRED, {"vgpu_gpu_node_taint": True})
    assert init[1]["apiServer"]["extraArgs"] == [
        {"name": "enable-admission-plugins", "value": "NodeRestriction,ExtendedResourceToleration"}
    ]
    _with, _without, init = run(tmp_path, UNWIRED, {"vgpu_gpu_node_taint": True, "vgpu_kubernetes_version": "1.30.8"})
    assert init[1]["apiServer"]["extraArgs"] == {
        "enable-admission-plugins": "NodeRestriction,ExtendedResourceToleration"
    }


def test_without_the_taint_kube_apiserver_keeps_kubeadms_flags(v1beta4):
    _with, _without, init = v1beta4
    assert "apiServer" not in init[1]
