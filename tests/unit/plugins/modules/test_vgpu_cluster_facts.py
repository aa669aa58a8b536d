"""vgpu_cluster_facts: what it expects where, what it reports missing, and the sample pod.

The API server is the in-memory fake of k8s_fake.py (no API server runs in unit tests), and the
extender health check is a stub where noted; tests/k8s runs the module against a real API server.
"""

import json

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.vgpu.isolation.plugins.modules import vgpu_cluster_facts
from k8s_fake import FakeApi


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
        "status": {
            "phase": "Running" if running else "Pending",
            "containerStatuses": [{"ready": running}],
        },
    }


def params(**overrides):
    base: dict = {key: spec.get("default") for key, spec in vgpu_cluster_facts.ARGUMENT_SPEC.items()}
    base.update(overrides)
    return base


def reachable(url):
    return {"url": url, "checked": True, "reachable": True, "status": 200, "error": ""}


def healthy_cluster():
    objects = [node("edge", control_plane=True, units=240), node("gpu-2", mps=True, units=480)]
    objects += [pod(c, "edge") for c in ("nvidia-shared-device-plugin", "cgpu-monitor", "gpushare-scheduler-extender")]
    objects += [pod(c, "gpu-2") for c in ("nvidia-shared-device-plugin", "cgpu-monitor", "nvidia-mps")]
    return objects


def test_a_healthy_single_node_edge_plus_an_mps_worker_reports_no_problem():
    result = vgpu_cluster_facts.run(FakeApi(healthy_cluster()), params(), False, extender_check=reachable)
    assert result["problems"] == []
    assert result["healthy"] is True
    assert result["components"]["nvidia-mps"] == {"expected": 1, "running": 1, "nodes": {"gpu-2": "Running"}}
    assert result["components"]["gpushare-scheduler-extender"]["expected"] == 1
    assert [(n["name"], n["allocatable_mib"]) for n in result["nodes"]] == [("edge", 24000), ("gpu-2", 48000)]
    assert result["ansible_facts"]["vgpu_cluster"]["healthy"] is True
    assert result["changed"] is False


def test_a_pending_monitor_a_silent_node_and_a_missing_node_are_each_reported():
    objects = healthy_cluster()
    objects[1] = node("gpu-2", mps=True, units=0)
    objects = [o for o in objects if o["metadata"]["name"] != "cgpu-monitor-gpu-2"]
    objects.append(pod("cgpu-monitor", "gpu-2", running=False))
    result = vgpu_cluster_facts.run(
        FakeApi(objects), params(gpu_nodes=["edge", "gpu-2", "gpu-3"]), False, extender_check=reachable
    )
    assert result["healthy"] is False
    assert result["problems"] == [
        "GPU node gpu-3 is not registered in the cluster",
        "cgpu-monitor is not running on gpu-2 (Pending)",
        "GPU node gpu-2 advertises no vgpu.io/gpu-memory",
    ]


def test_an_unreachable_extender_is_a_problem():
    def refused(url):
        return {"url": url, "checked": True, "reachable": False, "status": None, "error": "Connection refused"}

    result = vgpu_cluster_facts.run(FakeApi(healthy_cluster()), params(), False, extender_check=refused)
    assert result["problems"] == [
        "scheduler extender at http://127.0.0.1:32766/healthz is not reachable: Connection refused"
    ]


def test_the_real_extender_check_reports_a_closed_port_as_unreachable():
    """No stub: a GET to a port nothing listens on."""
    result = vgpu_cluster_facts.check_extender("http://127.0.0.1:9/healthz")
    assert result["reachable"] is False
    assert result["error"]


def test_sample_pod_asks_for_quota_over_unit_and_reads_nvidia_smi():
    api = FakeApi(healthy_cluster())
    smi = "|  0  NVIDIA A10   On | 00000000:00:1E.0 Off |  1200MiB /  3000MiB |  0%  Default |"

    def finish(kind, name, obj):
        if kind == "Pod" and obj is not None and name.startswith("vgpu-sample-"):
            obj["spec"]["nodeName"] = "edge"
            obj["status"] = {"phase": "Succeeded"}
            api.store[("Pod", "default", name)] = obj
            api.logs[name] = smi

    api.on_get = finish
    result = vgpu_cluster_facts.run(api, params(sample_app=True), False, extender_check=reachable)
    sample = result["sample"]
    seen = (sample["phase"], sample["used_mib"], sample["total_mib"], sample["node"])
    assert seen == ("Succeeded", 1200, 3000, "edge")
    assert result["problems"] == []
    applied = [c for c in api.calls if c[0] == "apply"]
    assert applied and not any(k[0] == "Pod" and k[1] == "default" for k in api.store), "sample pod deleted"


def test_without_nvidia_smi_the_sample_reads_libvgpus_own_report():
    """A container the runtime gave no nvidia-smi (the e2e node's fake driver has none): the sample's
    log holds what `manage --stats` printed instead, and that counts."""
    api = FakeApi(healthy_cluster())
    log = (
        "allocated 1200 MiB on device 0; cuMemGetInfo: free 1288 MiB, total 3000 MiB; holding 20 s\n"
        "/bin/sh: 1: nvidia-smi: not found\n"
        "region /var/run/vgpu/vgpu.region (version 2, flags 0x3, context charge 512 MiB)\n"
        "device 0 GPU-10111213-1415-1617-1819-1a1b1c1d1e1f: quota 3000 MiB, used 1200.0 MiB, contexts 512.0 MiB,"
        " peak memory 1712.0 MiB\n"
    )

    def finish(kind, name, obj):
        if kind == "Pod" and obj is not None and name.startswith("vgpu-sample-"):
            obj["spec"]["nodeName"] = "edge"
            obj["status"] = {"phase": "Succeeded"}
            api.store[("Pod", "default", name)] = obj
            api.logs[name] = log

    api.on_get = finish
    result = vgpu_cluster_facts.run(api, params(sample_app=True), False, extender_check=reachable)
    assert (result["sample"]["used_mib"], result["sample"]["total_mib"]) == (1200, 3000)
    assert result["problems"] == []


def test_the_default_sample_prints_nvidia_smi_and_libvgpus_report_while_it_holds():
    command = vgpu_cluster_facts.sample_pod_manifest(params(), "s")["spec"]["containers"][0]["command"][2]
    assert command.index("nvidia-smi") < command.index("/opt/vgpu/manage --stats") < command.index("wait")


def test_sample_manifest_requests_whole_units_of_the_prefix():
    manifest = vgpu_cluster_facts.sample_pod_manifest(params(resource_prefix="acme.dev", unit_mib=50), "s")
    container = manifest["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"acme.dev/gpu-memory": "60"}
    assert "vgpu-memory-usage 1200 " in container["command"][2]
    assert manifest["spec"]["runtimeClassName"] == "nvidia"


def test_a_sample_that_sees_the_whole_gpu_is_a_problem():
    problems = vgpu_cluster_facts.sample_problems(
        params(), {"name": "s", "phase": "Succeeded", "node": "edge", "total_mib": 24000}
    )
    assert problems == [
        "sample pod saw 24000 MiB of GPU memory in nvidia-smi (or libvgpu's report), expected the quota 3000 MiB"
    ]


def test_sample_is_not_run_in_check_mode():
    api = FakeApi(healthy_cluster())
    result = vgpu_cluster_facts.run(api, params(sample_app=True), True, extender_check=reachable)
    assert result["sample"] == {"ran": False, "reason": "check mode"}
    assert not [c for c in api.calls if c[0] == "apply"]


def test_a_sample_log_without_a_memory_line_leaves_the_memory_unknown():
    api = FakeApi(healthy_cluster())

    def finish(kind, name, obj):
        if kind == "Pod" and obj is not None and name.startswith("vgpu-sample-"):
            obj["spec"]["nodeName"] = "edge"
            obj["status"] = {"phase": "Succeeded"}
            api.store[("Pod", "default", name)] = obj
            api.logs[name] = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."

    api.on_get = finish
    outcome = vgpu_cluster_facts.run_sample(api, params(sample_app=True))
    assert (outcome["phase"], outcome["used_mib"], outcome["total_mib"]) == ("Succeeded", None, None)


def test_main_refuses_a_quota_that_is_not_a_multiple_of_the_unit(capsys, monkeypatch):
    monkeypatch.setattr(vgpu_cluster_facts, "HAS_KUBERNETES", True)
    with patch_module_args({"sample_quota_mib": 3050, "unit_mib": 100}), pytest.raises(SystemExit):
        vgpu_cluster_facts.main()
    out = json.loads(capsys.readouterr().out)
    assert out["failed"] is True
    assert out["msg"] == "sample_quota_mib 3050 must be a positive multiple of unit_mib 100"
