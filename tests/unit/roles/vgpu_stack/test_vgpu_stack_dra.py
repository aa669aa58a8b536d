"""vgpu_scheduling: dra in roles/vgpu_stack (docs/dra.md), rendered by Ansible itself.

With dra the role deploys the DRA driver and its DeviceClass in place of the scheduler extender and
the device plugin, and gives the driver exactly the API access it needs; the default stays the
extender path.
"""

import os
import subprocess
import sys

import pytest
import yaml
from role_render import ROOT, render

# The components' own loader checks the rendered file, as each component does when it starts.
CHECK_CONFIG = "import sys; from vgpu_components import config; config.load(sys.argv[1], environ={})"

CASES = {
    "extender": {"vgpu_kubernetes_flavour": "kubeadm"},
    "dra": {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_scheduling": "dra"},
    "dra-custom": {
        "vgpu_kubernetes_flavour": "k3s",
        "vgpu_k3s_version": "v1.36.1+k3s1",
        "vgpu_scheduling": "dra",
        "vgpu_resource_prefix": "acme.dev",
        "vgpu_kubelet_dir": "/data/kubelet",
    },
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return {case: render(tmp_path_factory.mktemp(case), extra) for case, extra in CASES.items()}


def objects(rendered, case, kind):
    return {d["metadata"]["name"]: d for d in rendered[case]["components.yaml"] if d["kind"] == kind}


def test_the_extender_path_stays_the_default_and_has_no_dra_objects(rendered):
    assert sorted(objects(rendered, "extender", "DaemonSet")) == [
        "cgpu-monitor",
        "gpushare-scheduler-extender",
        "nvidia-mps",
        "nvidia-shared-device-plugin",
    ]
    assert objects(rendered, "extender", "DeviceClass") == {}


@pytest.mark.parametrize("case", ["dra", "dra-custom"])
def test_dra_deploys_the_driver_in_place_of_the_extender_and_the_device_plugin(rendered, case):
    assert sorted(objects(rendered, case, "DaemonSet")) == ["cgpu-monitor", "nvidia-mps", "vgpu-dra-driver"]
    accounts = objects(rendered, case, "ServiceAccount")
    assert "gpushare-scheduler-extender" not in accounts
    assert "nvidia-shared-device-plugin" not in accounts


@pytest.mark.parametrize(("case", "prefix"), [("dra", "vgpu.io"), ("dra-custom", "acme.dev")])
def test_the_device_class_selects_the_drivers_gpus(rendered, case, prefix):
    (device_class,) = objects(rendered, case, "DeviceClass").values()
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["metadata"]["name"] == f"gpu.{prefix}"
    assert device_class["spec"]["selectors"] == [{"cel": {"expression": f'device.driver == "gpu.{prefix}"'}}]


def test_the_driver_reads_claims_pods_and_its_node_and_writes_only_resource_slices(rendered):
    role = objects(rendered, "dra", "ClusterRole")["vgpu:vgpu-dra-driver"]
    rules = {
        (g, r): sorted(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
    }
    assert rules == {
        ("resource.k8s.io", "resourceclaims"): ["get"],
        ("resource.k8s.io", "resourceslices"): ["create", "delete", "get", "list", "update", "watch"],
        ("", "pods"): ["get"],
        ("", "nodes"): ["get"],
    }
    binding = objects(rendered, "dra", "ClusterRoleBinding")["vgpu:vgpu-dra-driver"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vgpu-dra-driver", "namespace": "kube-system"}]


def test_an_admission_policy_holds_the_driver_to_its_own_nodes_slices(rendered):
    policy = objects(rendered, "dra", "ValidatingAdmissionPolicy")["vgpu-dra-driver-own-node"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {
            "apiGroups": ["resource.k8s.io"],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "resources": ["resourceslices"],
        }
    ]
    condition = policy["spec"]["matchConditions"][0]["expression"]
    assert "system:serviceaccount:kube-system:vgpu-dra-driver" in condition
    checks = " ".join(v["expression"] for v in policy["spec"]["validations"])
    assert "authentication.kubernetes.io/node-name" in checks and "spec.nodeName" in checks
    assert 'spec.driver == "gpu.vgpu.io"' in checks
    binding = objects(rendered, "dra", "ValidatingAdmissionPolicyBinding")["vgpu-dra-driver-own-node"]
    assert binding["spec"] == {"policyName": "vgpu-dra-driver-own-node", "validationActions": ["Deny"]}


@pytest.mark.parametrize(("case", "kubelet"), [("dra", "/var/lib/kubelet"), ("dra-custom", "/data/kubelet")])
def test_the_driver_pod_reaches_kubelets_plugin_folders_and_the_cdi_folders(rendered, case, kubelet):
    ds = objects(rendered, case, "DaemonSet")["vgpu-dra-driver"]
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    assert container["command"] == ["vgpu-dra-driver", "--config", "/etc/vgpu/config.yaml"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    wanted = {
        "plugins": (f"{kubelet}/plugins", False),
        "plugins-registry": (f"{kubelet}/plugins_registry", False),
        "cdi": ("/var/run/cdi", False),
        "nvidia-cdi": ("/etc/cdi", True),
        "state": ("/var/lib/vgpu", False),
    }
    for name, (path, read_only) in wanted.items():
        assert mounts[name]["mountPath"] == path
        assert bool(mounts[name].get("readOnly")) is read_only
        assert volumes[name]["hostPath"]["path"] == path
    assert container["ports"] == [{"name": "healthz", "containerPort": 9398}]
    assert spec["securityContext"]["runAsUser"] == 0
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


@pytest.mark.parametrize(("case", "kubelet"), [("dra", "/var/lib/kubelet"), ("dra-custom", "/data/kubelet")])
def test_the_configuration_has_the_drivers_section_and_is_valid(rendered, case, kubelet, tmp_path):
    config_map = objects(rendered, case, "ConfigMap")["vgpu-config"]
    text = config_map["data"]["config.yaml"]
    doc = yaml.safe_load(text)
    assert doc["dra"] == {
        "plugins_dir": f"{kubelet}/plugins",
        "registry_dir": f"{kubelet}/plugins_registry",
        "cdi_dir": "/var/run/cdi",
        "nvidia_cdi_dirs": "/etc/cdi,/var/run/cdi",
        "healthz_port": 9398,
        "resync_s": 60.0,
    }
    (tmp_path / "config.yaml").write_text(text)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "files" / "components" / "src"))
    check = [sys.executable, "-c", CHECK_CONFIG, str(tmp_path / "config.yaml")]
    proc = subprocess.run(check, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr


def test_no_scheduler_wiring_is_checked_for_dra(rendered):
    """The scheduler configuration is rendered for checking only on the extender path (main.yml
    skips scheduler_config.yml with dra); the k3s and kubeadm roles skip it too."""
    for path in ("roles/k3s/tasks/node.yml", "roles/kubeadm/tasks/control_plane.yml", "roles/kubeadm/tasks/join.yml"):
        tasks = yaml.safe_load((ROOT / path).read_text())
        (include,) = [t for t in tasks if "scheduler_config.yml" in str(t.get("ansible.builtin.include_role", ""))]
        assert "vgpu_scheduling == 'extender'" in str(include.get("when")), path
