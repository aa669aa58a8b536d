"""Who reaches a GPU, in the vgpu_stack templates (issue 28, part A), rendered by Ansible itself.

The NVIDIA runtime takes an unprivileged container's devices only from the device-list mounts
(roles/nvidia_container_runtime): the components that read NVML get theirs by the same rule as
every container, a /dev/null hostPath at the device-list path. With vgpu_gpu_node_taint the GPU
nodes carry <prefix>/gpu-memory:NoSchedule: every component that must run there tolerates it, and
on the DRA path an admission policy gives pods with claims the toleration that kube-apiserver's
ExtendedResourceToleration gives pods with units.
"""

import pytest
from role_render import render
from vgpu_components.container import DEVICE_LIST_ROOT

CASES = {
    "extender": {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_mps_enabled": True},
    "dra": {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_scheduling": "dra", "vgpu_mps_enabled": True},
    "extender-tainted": {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_gpu_node_taint": True},
    "dra-tainted": {
        "vgpu_kubernetes_flavour": "kubeadm",
        "vgpu_scheduling": "dra",
        "vgpu_gpu_node_taint": True,
        "vgpu_resource_prefix": "acme.dev",
    },
}
GPU_COMPONENTS = {"nvidia-shared-device-plugin", "vgpu-dra-driver", "cgpu-monitor", "nvidia-mps"}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return {case: render(tmp_path_factory.mktemp(case), extra)["components.yaml"] for case, extra in CASES.items()}


def daemonsets(docs):
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "DaemonSet"}


def tolerates(tolerations, key, effect):
    """Kubernetes' rule: a toleration matches a taint by key (empty key with Exists: every key) and
    effect (empty: every effect)."""
    for t in tolerations:
        key_matches = t.get("key", "") == key or (not t.get("key") and t.get("operator") == "Exists")
        if key_matches and t.get("effect", "") in ("", effect) and t.get("operator", "Equal") == "Exists":
            return True
    return False


@pytest.mark.parametrize("case", ["extender", "dra"])
def test_the_components_get_their_gpus_from_the_device_list_mount(rendered, case):
    """Each component that reads NVML mounts /dev/null by hostPath at <device-list root>/all, read-only:
    what the runtime takes from an unprivileged container (the env only from privileged ones)."""
    pods = daemonsets(rendered[case])
    gpu = {name for name, pod in pods.items() if name in GPU_COMPONENTS}
    assert gpu == ({"vgpu-dra-driver"} if case == "dra" else {"nvidia-shared-device-plugin"}) | {
        "cgpu-monitor",
        "nvidia-mps",
    }
    for name in gpu:
        pod = pods[name]
        volumes = {v["name"]: v for v in pod["volumes"]}
        (container,) = pod["containers"]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        mount = mounts[f"{DEVICE_LIST_ROOT}/all"]
        assert mount["readOnly"] is True, name
        assert volumes[mount["name"]]["hostPath"] == {"path": "/dev/null", "type": "CharDevice"}, name
        assert {e["name"]: e["value"] for e in container["env"] if e["name"] == "NVIDIA_VISIBLE_DEVICES"} == {
            "NVIDIA_VISIBLE_DEVICES": "all"
        }, name


@pytest.mark.parametrize("case", ["extender-tainted", "dra-tainted"])
def test_every_component_that_runs_on_gpu_nodes_tolerates_their_taint(rendered, case):
    """The GPU nodes' taint keeps other pods off; the node agents, the monitor, nvidia-mps and the
    extender (on a control plane that is also the GPU node) still run there."""
    prefix = "acme.dev" if case == "dra-tainted" else "vgpu.io"
    for name, pod in daemonsets(rendered[case]).items():
        assert tolerates(pod.get("tolerations", []), f"{prefix}/gpu-memory", "NoSchedule"), name


def test_the_dra_path_gives_pods_with_claims_the_toleration(rendered):
    """Only with the taint and on the DRA path: a MutatingAdmissionPolicy adds the toleration of
    <prefix>/gpu-memory:NoSchedule to a new pod with resource claims that does not have it yet."""
    policies = [d for d in rendered["dra-tainted"] if d["kind"].startswith("MutatingAdmissionPolicy")]
    assert [d["kind"] for d in policies] == ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    policy, binding = policies
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy["apiVersion"] == "admissionregistration.k8s.io/v1"
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["pods"], ["CREATE"])
    conditions = " ".join(c["expression"] for c in policy["spec"]["matchConditions"])
    assert "resourceClaims" in conditions and "'acme.dev/gpu-memory'" in conditions
    patch = policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
    assert patch.count('key: "acme.dev/gpu-memory", operator: "Exists", effect: "NoSchedule"') == 2
    for case in ("extender", "dra", "extender-tainted"):
        assert not [d for d in rendered[case] if d["kind"].startswith("MutatingAdmissionPolicy")], case
