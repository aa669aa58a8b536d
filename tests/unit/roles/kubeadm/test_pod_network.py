"""The kubeadm role's pod network: which one a site gets (kubeadm_cni), and the CNI configuration
and flanneld unit a node gets for it. Rendered by Ansible itself (ansible-playbook on localhost);
flanneld carrying pods between nodes is tested on real nodes by tests/site (make e2e-site).
"""

import json
import sys
from pathlib import Path

import pytest
import yaml
from role_render import ROOT, role_play, run_playbook

ROLE = ROOT / "roles" / "kubeadm"


def tasks(out: Path) -> list[dict]:
    """Keep the site's kubeadm_cni; render the node's CNI configuration and flanneld unit into ``out``."""
    template = "ansible.builtin.template"
    return [
        {
            "name": "Keep the pod network the site gets",
            "ansible.builtin.copy": {"content": "{{ kubeadm_cni }}", "dest": f"{out}/cni", "mode": "0644"},
        },
        {
            "name": "Render the CNI configuration",
            template: {
                "src": f"{ROLE}/templates/10-vgpu-bridge.conflist.j2",
                "dest": f"{out}/conflist.json",
                "mode": "0644",
            },
        },
        {
            "name": "Render the flanneld unit",
            template: {
                "src": f"{ROLE}/templates/flanneld.service.j2",
                "dest": f"{out}/flanneld.service",
                "mode": "0644",
            },
            "vars": {"kubeadm_flannel_interface": "172.31.251.11"},
        },
    ]


def render(tmp_path: Path, **variables: object) -> tuple[str, dict, str]:
    """(kubeadm_cni, the CNI configuration, the flanneld unit) for a node with these settings."""
    (tmp_path / "play.yml").write_text(role_play("kubeadm", tasks(tmp_path), tmp_path / "vars.json"))
    facts = {"nodename": "vgpu-site-a", "os_family": "Debian"}
    (tmp_path / "vars.json").write_text(
        json.dumps({"ansible_facts": facts, "ansible_python_interpreter": sys.executable, **variables})
    )
    run_playbook(str(tmp_path / "play.yml"))
    conflist = json.loads((tmp_path / "conflist.json").read_text())
    return (tmp_path / "cni").read_text(), conflist, (tmp_path / "flanneld.service").read_text()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"vgpu_offline_bundle_dir": "/srv/vgpu-bundle"}, "flannel"),
        ({}, "bridge"),
        ({"vgpu_offline_bundle_dir": "/srv/vgpu-bundle", "kubeadm_cni_manifest_src": "/srv/calico.yaml"}, "manifest"),
        ({"vgpu_offline_bundle_dir": "/srv/vgpu-bundle", "kubeadm_cni": "bridge"}, "bridge"),
    ],
)
def test_a_site_from_the_bundle_gets_flannel_unless_told(tmp_path, settings, expected):
    """The bundle brings flanneld, so a bundled site's nodes reach each other's pods by default; a site
    without it keeps the one-node bridge, and a manifest or an explicit choice wins."""
    cni, _conflist, _unit = render(tmp_path, **settings)
    assert cni == expected


def test_flannel_hands_out_the_nodes_own_range_at_flannels_mtu(tmp_path):
    """Each node's pods get addresses from its own podCIDR (two nodes never hand out the same
    address), at the VXLAN MTU, and flanneld masquerades what leaves the cluster (not the bridge)."""
    _cni, conflist, unit = render(
        tmp_path, kubeadm_cni="flannel", kubeadm_cni_range="10.244.2.0/24", kubeadm_cni_mtu=1450
    )
    bridge = conflist["plugins"][0]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.2.0/24"}]]
    assert bridge["mtu"] == 1450
    assert bridge["ipMasq"] is False
    assert "Environment=NODE_NAME=vgpu-site-a" in unit
    assert "--kube-subnet-mgr --kubeconfig-file=/etc/kube-flannel/kubeconfig" in unit
    assert "--ip-masq --iface=172.31.251.11" in unit


def test_the_bridge_network_is_unchanged(tmp_path):
    """kubeadm_cni bridge: the whole pod subnet on the node, masqueraded by the bridge, no MTU."""
    _cni, conflist, _unit = render(tmp_path, kubeadm_cni="bridge")
    bridge = conflist["plugins"][0]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/16"}]]
    assert bridge["ipMasq"] is True
    assert "mtu" not in bridge


def test_flanneld_s_token_is_renewed_hourly_on_the_node_by_its_script(tmp_path):
    """Issue 40 item 5: the node renews its 24 h node-bound token every hour (the token's scope and
    expiry against the real API server: tests/k8s/test_flanneld_token.py)."""
    (tmp_path / "play.yml").write_text(
        role_play(
            "kubeadm",
            [
                {
                    "name": "Render the renewal's units",
                    "ansible.builtin.template": {
                        "src": f"{ROLE}/templates/{{{{ item }}}}.j2",
                        "dest": f"{tmp_path}/{{{{ item }}}}",
                        "mode": "0644",
                    },
                    "loop": ["vgpu-flanneld-token.service", "vgpu-flanneld-token.timer"],
                }
            ],
            tmp_path / "vars.json",
        )
    )
    facts = {"nodename": "vgpu-site-a", "os_family": "Debian"}
    (tmp_path / "vars.json").write_text(
        json.dumps({"ansible_facts": facts, "ansible_python_interpreter": sys.executable})
    )
    run_playbook(str(tmp_path / "play.yml"))
    service = (tmp_path / "vgpu-flanneld-token.service").read_text()
    timer = (tmp_path / "vgpu-flanneld-token.timer").read_text()
    assert "Environment=NODE_NAME=vgpu-site-a" in service
    assert "ExecStart=/usr/local/libexec/vgpu-flanneld-token" in service
    assert "OnUnitActiveSec=1h" in timer and "WantedBy=timers.target" in timer


def test_the_script_s_folder_is_created_before_the_script_is_installed():
    """/usr/local/libexec does not exist on a minimal Debian node (an earlier attempt failed there)."""
    flannel = yaml.safe_load((ROLE / "tasks" / "flannel.yml").read_text())
    (block,) = [task["block"] for task in flannel if "block" in task]
    names = [task["name"] for task in block]
    folder = names.index("Create the folder of the token's renewal script")
    script = names.index("Install the script that renews flanneld's token with itself")
    assert folder < script
    assert block[folder]["ansible.builtin.file"]["path"] == "{{ kubeadm_flannel_token_script_dir }}"
    script_path = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["kubeadm_flannel_token_script"]
    assert script_path.startswith("{{ kubeadm_flannel_token_script_dir }}/"), script_path


def test_flanneld_has_no_long_lived_token_and_is_held_to_its_own_node():
    items = {
        (i["kind"], i["metadata"]["name"])
        for i in yaml.safe_load((ROLE / "files" / "flanneld-rbac.yaml").read_text())["items"]
    }
    assert not [name for kind, name in items if kind == "Secret"], items
    assert ("ValidatingAdmissionPolicy", "vgpu-flanneld-own-node") in items
    assert ("ValidatingAdmissionPolicyBinding", "vgpu-flanneld-own-node") in items
