"""The cluster views (plugins/filter/cluster.py) over objects as kubernetes.core.k8s_info returns them.

Pure functions: no API server. roles/vgpu_stack's cluster_info entry point feeds them from a real
one in tests/k8s and on the e2e node.
"""

import json

import pytest
from ansible_collections.vgpu.isolation.plugins.filter.cluster import (
    FilterModule,
    admission_policy_problems,
    cluster_health,
    gpu_memory_holders,
    mps_label_changes,
    sample_memory,
    without_admission_plugin,
)


def node(name, control_plane=False, mps=False, units=0):
    labels = {"vgpu.io/gpu-node": "true", "vgpu.io/mps": "true" if mps else "false"}
    if control_plane:
        labels["node-role.kubernetes.io/control-plane"] = "true"
    status = {"capacity": {"vgpu.io/gpu-memory": str(units)}, "allocatable": {"vgpu.io/gpu-memory": str(units)}}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "status": status}


def pod(component, node_name, running=True):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{component}-{node_name}",
            "namespace": "kube-system",
            "labels": {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": "vgpu-isolation"},
        },
        "spec": {"nodeName": node_name},
        "status": {"phase": "Running" if running else "Pending", "containerStatuses": [{"ready": running}]},
    }


def healthy():
    nodes = [node("edge", control_plane=True, units=240), node("gpu-2", mps=True, units=480)]
    pods = [pod(c, "edge") for c in ("nvidia-shared-device-plugin", "cgpu-monitor", "gpushare-scheduler-extender")]
    pods += [pod(c, "gpu-2") for c in ("nvidia-shared-device-plugin", "cgpu-monitor", "nvidia-mps")]
    return nodes, pods


def test_a_healthy_single_node_edge_plus_an_mps_worker_reports_no_problem():
    nodes, pods = healthy()
    result = cluster_health(nodes, pods, ["edge", "gpu-2"])
    assert result["problems"] == []
    assert result["components"]["nvidia-mps"] == {"expected": 1, "running": 1, "nodes": {"gpu-2": "Running"}}
    assert result["components"]["gpushare-scheduler-extender"]["expected"] == 1
    assert [(n["name"], n["allocatable_mib"]) for n in result["nodes"]] == [("edge", 24000), ("gpu-2", 48000)]


def test_without_names_the_labelled_nodes_are_the_gpu_nodes():
    nodes, pods = healthy()
    assert cluster_health(nodes, pods)["gpu_nodes"] == ["edge", "gpu-2"]
    assert cluster_health([], [])["problems"] == ["no GPU node: none named and none labelled vgpu.io/gpu-node=true"]


def test_a_pending_monitor_a_silent_node_and_a_missing_node_are_each_reported():
    nodes, pods = healthy()
    nodes[1] = node("gpu-2", mps=True, units=0)
    pods = [p for p in pods if p["metadata"]["name"] != "cgpu-monitor-gpu-2"] + [pod("cgpu-monitor", "gpu-2", False)]
    assert cluster_health(nodes, pods, ["edge", "gpu-2", "gpu-3"])["problems"] == [
        "GPU node gpu-3 is not registered in the cluster",
        "cgpu-monitor is not running on gpu-2 (Pending)",
        "GPU node gpu-2 advertises no vgpu.io/gpu-memory",
    ]


def workload(name, *, phase="Running", units="30", node_name="edge", prefix="vgpu.io", where="limits"):
    container = {"name": "c", "resources": {where: {f"{prefix}/gpu-memory": units}}}
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"nodeName": node_name, "containers": [container, {"name": "sidecar"}]},
        "status": {"phase": phase},
    }


def test_the_pods_that_hold_gpu_memory_are_named_with_their_units():
    pods = [
        workload("a"),
        workload("b", phase="Pending", where="requests"),
        workload("done", phase="Succeeded"),
        workload("failed", phase="Failed"),
        workload("unplaced", node_name=None),
        workload("other-prefix", prefix="acme.dev"),
        {"metadata": {"name": "plain", "namespace": "x"}, "spec": {"nodeName": "edge", "containers": [{}]}},
    ]
    assert gpu_memory_holders(pods) == ["team-a/a on edge (30 units)", "team-a/b on edge (30 units)"]


def test_only_nodes_whose_mps_label_is_set_and_differs_restart_their_device_plugin():
    nodes = [node("on-now", mps=False), node("same", mps=True), node("new", mps=False), node("not-gpu")]
    del nodes[2]["metadata"]["labels"]["vgpu.io/mps"]
    wanted = [{"name": "on-now", "mps": True}, {"name": "same", "mps": True}, {"name": "new", "mps": True}]
    assert mps_label_changes(nodes, wanted) == ["on-now"]


def test_the_sample_reads_nvidia_smi_or_libvgpus_own_report():
    smi = "|  0  NVIDIA A10   On | 00000000:00:1E.0 Off |  1200MiB /  3000MiB |  0%  Default |"
    assert sample_memory(smi) == {"used_mib": 1200, "total_mib": 3000}
    stats = "device 0 GPU-1: quota 3000 MiB, used 1200.0 MiB, contexts 0.0 MiB, peak memory 1200.0 MiB"
    assert sample_memory(stats) == {"used_mib": 1200, "total_mib": 3000}
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    assert sample_memory(failed) == {"used_mib": None, "total_mib": None}


def test_the_plugin_exposes_the_filters():
    assert set(FilterModule().filters()) == {
        "admission_policy_problems",
        "cluster_health",
        "gpu_memory_holders",
        "mps_label_changes",
        "sample_memory",
        "without_admission_plugin",
    }


def apiserver(name, *args):
    command = ["kube-apiserver", "--advertise-address=10.0.0.10", *args, "--secure-port=6443"]
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "kube-apiserver", "command": command}]}}


def test_kube_apiservers_without_the_toleration_plugin_are_named():
    """vgpu_gpu_node_taint on a kubeadm cluster: GPU pods get the taint's toleration only from
    kube-apiserver's ExtendedResourceToleration, so vgpu_stack names the API servers without it."""
    pods = [
        apiserver("kube-apiserver-cp-1", "--enable-admission-plugins=NodeRestriction,ExtendedResourceToleration"),
        apiserver("kube-apiserver-cp-2", "--enable-admission-plugins=NodeRestriction"),
        apiserver("kube-apiserver-cp-3"),
        apiserver(
            "kube-apiserver-cp-4",
            "--enable-admission-plugins=ExtendedResourceToleration",
            "--disable-admission-plugins=ExtendedResourceToleration",
        ),
    ]
    missing = without_admission_plugin(pods, "ExtendedResourceToleration")
    assert missing == ["kube-apiserver-cp-2", "kube-apiserver-cp-3", "kube-apiserver-cp-4"]
    assert without_admission_plugin([], "ExtendedResourceToleration") == []


def resource_slice(node_name, *mib, driver="gpu.vgpu.io"):
    devices = [{"name": f"gpu-{i}", "capacity": {"memory": {"value": f"{m}Mi"}}} for i, m in enumerate(mib)]
    spec = {"nodeName": node_name, "driver": driver, "devices": devices}
    return {"metadata": {"name": f"{node_name}-{driver}"}, "spec": spec}


def test_on_the_dra_path_the_driver_runs_and_each_gpu_node_publishes_its_memory():
    """vgpu_scheduling dra: the DRA driver instead of the device plugin, no extender, and the memory a
    GPU node offers is its ResourceSlice's (make e2e-node-dra: verify_cluster.yml asked for the
    extender path's components and units there)."""
    nodes = [node("edge", control_plane=True), node("gpu-2", mps=True)]
    pods = [pod(c, "edge") for c in ("vgpu-dra-driver", "cgpu-monitor")]
    pods += [pod(c, "gpu-2") for c in ("vgpu-dra-driver", "cgpu-monitor", "nvidia-mps")]
    slices = [resource_slice("edge", 12200, 12200), resource_slice("gpu-2", 24000)]
    slices.append(resource_slice("gpu-2", 5, driver="x.io"))  # another driver's: not ours
    result = cluster_health(nodes, pods, ["edge", "gpu-2"], scheduling="dra", slices=slices)
    assert result["problems"] == []
    assert result["components"]["vgpu-dra-driver"] == {
        "expected": 2,
        "running": 2,
        "nodes": {"edge": "Running", "gpu-2": "Running"},
    }
    assert result["components"]["gpushare-scheduler-extender"]["expected"] == 0
    assert [(n["name"], n["allocatable_mib"]) for n in result["nodes"]] == [("edge", 24400), ("gpu-2", 24000)]
    silent = cluster_health(nodes, pods[:2], ["edge", "gpu-2"], scheduling="dra", slices=slices[:1])
    assert silent["problems"] == [
        "vgpu-dra-driver is not running on gpu-2 (no pod)",
        "cgpu-monitor is not running on gpu-2 (no pod)",
        "nvidia-mps is not running on gpu-2 (no pod)",
        "GPU node gpu-2 publishes no ResourceSlice of gpu.vgpu.io",
    ]


def test_each_gpu_s_offer_comes_from_the_device_plugin_s_annotation_or_the_resource_slice():
    """sample.yml compares the sample pod's quota with these before it starts the pod (issue 25 item 4)."""
    annotated = node("edge", control_plane=True, units=89)
    gpus = [{"uuid": "GPU-a", "index": 0, "key": "a", "total_mib": 23028, "units": 89, "used_units": 0}]
    annotated["metadata"]["annotations"] = {"vgpu.io/gpus": json.dumps({"unit_mib": 256, "gpus": gpus})}
    pods = [pod(c, "edge") for c in ("nvidia-shared-device-plugin", "cgpu-monitor", "gpushare-scheduler-extender")]
    (view,) = cluster_health([annotated], pods, ["edge"], unit_mib=256)["nodes"]
    assert view["gpus"] == [{"index": 0, "total_mib": 23028, "offered_mib": 22784}]
    dra = cluster_health([node("edge")], [], ["edge"], scheduling="dra", slices=[resource_slice("edge", 22784, 15360)])
    assert dra["nodes"][0]["gpus"] == [{"index": 0, "offered_mib": 22784}, {"index": 1, "offered_mib": 15360}]


def test_an_unreadable_annotation_offers_no_gpu():
    broken = node("edge", units=1)
    broken["metadata"]["annotations"] = {"vgpu.io/gpus": "{not json"}
    assert cluster_health([broken], [], ["edge"])["nodes"][0]["gpus"] == []


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("8Gi", 8192),
        ("12200Mi", 12200),
        ("1Ti", 1048576),
        ("0", 0),
    ],
)
def test_a_slice_s_memory_reads_in_the_api_server_s_canonical_form(value, mib):
    """The DRA driver publishes "<n>Mi"; the API server returns the canonical quantity, so 8192 MiB
    comes back as "8Gi" (issue 39 drift 3: read as 0 offered, and the sample pod judged not to fit)."""
    published = resource_slice("edge", 0)
    published["spec"]["devices"][0]["capacity"]["memory"]["value"] = value
    result = cluster_health([node("edge")], [], ["edge"], scheduling="dra", slices=[published])
    assert result["nodes"][0]["gpus"] == [{"index": 0, "offered_mib": mib}]
    assert result["nodes"][0]["allocatable_mib"] == mib


def test_a_gpu_s_offer_counts_in_the_unit_the_device_plugin_published():
    """Issue 39: the cluster view took today's vgpu_memory_unit_mib for the annotation's, so while a
    unit change rolled out it showed what the extender, which reads the annotation's unit_mib, did not
    count; both read the annotation with one reader now (module_utils/gpus_annotation.py)."""
    published = node("edge", units=89)
    gpus = [{"uuid": "GPU-a", "index": 0, "key": "a", "total_mib": 23028, "units": 89, "used_units": 0}]
    published["metadata"]["annotations"] = {"vgpu.io/gpus": json.dumps({"unit_mib": 256, "gpus": gpus})}
    (view,) = cluster_health([published], [], ["edge"], unit_mib=100)["nodes"]
    assert view["gpus"] == [{"index": 0, "total_mib": 23028, "offered_mib": 89 * 256}]


@pytest.mark.parametrize(
    "annotation",
    [
        {"gpus": [{"uuid": "GPU-a", "index": 0, "units": 89}]},  # no unit_mib
        {"unit_mib": 256, "gpus": [{"uuid": "GPU-a", "index": "zero", "units": 89}]},
        {"unit_mib": 256, "gpus": [{"uuid": "GPU-a", "units": 89}]},  # no index
    ],
)
def test_an_annotation_the_extender_cannot_read_offers_no_gpu_here_either(annotation):
    broken = node("edge", units=1)
    broken["metadata"]["annotations"] = {"vgpu.io/gpus": json.dumps(annotation)}
    assert cluster_health([broken], [], ["edge"])["nodes"][0]["gpus"] == []


POLICY = {"metadata": {"name": "vgpu-tenant-pods"}, "spec": {"validations": [{"expression": "true"}]}}


def binding(name="vgpu-tenant-pods", policy="vgpu-tenant-pods", actions=("Deny",)):
    return {"metadata": {"name": name}, "spec": {"policyName": policy, "validationActions": list(actions)}}


def test_an_admission_policy_counts_only_when_it_exists_and_a_binding_denies_with_it():
    """Issue 40 item 4: verify_cluster.yml fails where the tenant pod policy is missing or unbound;
    a binding that only warns or audits refuses nothing."""
    assert admission_policy_problems([POLICY], [binding()], "vgpu-tenant-pods") == []
    assert admission_policy_problems([POLICY], [binding(name="site-own")], "vgpu-tenant-pods") == []
    (missing,) = admission_policy_problems([], [binding()], "vgpu-tenant-pods")
    assert missing.startswith("admission policy vgpu-tenant-pods is missing"), missing
    assert "run the stack's role again" in missing, missing
    for bindings in ([], [binding(policy="other")], [binding(actions=("Warn", "Audit"))]):
        (unbound,) = admission_policy_problems([POLICY], bindings, "vgpu-tenant-pods")
        assert unbound.startswith("admission policy vgpu-tenant-pods has no binding that denies"), unbound
    assert len(admission_policy_problems([], [], "vgpu-tenant-pods")) == 2
