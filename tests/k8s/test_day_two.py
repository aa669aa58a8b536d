"""Day two against the real API server (issue 14 items 5, 6 and 8): the cluster check on a simulated
GPU node, the refusal of a unit change while a pod holds GPU memory, a drain and uncordon as
upgrade.yml does them, and the monitoring objects rendered only where the Prometheus operator's
CRDs exist.

Everything runs through ansible-playbook with the collection as the working tree and
kubernetes.core in this machine's virtualenv; the GPU node is a kwok node (tests/k8s), so its
component pods are "Running" without containers: what the roles read and write is real, the
containers are not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests import recap
from tests.k8s import cluster, slow_kubelet

NS = "kube-system"
PLUGIN = "app.kubernetes.io/name=nvidia-shared-device-plugin"


def playbook(work: Path, tasks: str, gpu_node: str, **extra: Any) -> subprocess.CompletedProcess[str]:
    """Run `tasks` on the control plane (localhost) of an inventory whose one GPU node is `gpu_node`."""
    collections = work / "collections" / "ansible_collections" / "vgpu"
    collections.mkdir(parents=True, exist_ok=True)
    if not (collections / "isolation").exists():
        (collections / "isolation").symlink_to(cluster.REPO_ROOT)
    control_plane = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    gpu_host = {"vgpu_stack_node_name": gpu_node, "vgpu_mps_enabled": True}
    inventory = {
        "all": {
            "children": {
                "k8s_control_plane": {"hosts": {"localhost": control_plane}},
                "gpu_nodes": {"hosts": {"kwok-gpu": gpu_host}},
            }
        }
    }
    (work / "inventory.yml").write_text(yaml.safe_dump(inventory))
    (work / "play.yml").write_text(
        "- hosts: k8s_control_plane\n  gather_facts: true\n  tasks:\n" + tasks,
    )
    settings = {
        "vgpu_kubernetes_flavour": "kubeadm",
        "vgpu_kubeconfig": str(cluster.STATE_DIR / "admin.kubeconfig"),
        "vgpu_kubernetes_client_venv": sys.prefix,
        "vgpu_stack_install_python_client": False,
        "vgpu_scheduler_kubeconfig": str(cluster.STATE_DIR / "scheduler.kubeconfig"),
        "vgpu_extender_port": cluster.extender_port(),
        "vgpu_extender_tls": False,
        "vgpu_stack_manifest_dir": str(work / "manifests"),
        "vgpu_component_image_import": False,
        "vgpu_scheduler_manage": False,
        # How long a rollout may stand still: kwok has marked bound pods Running up to a minute
        # late (on Debian's etcd 3.4, which up.sh falls back to; cold CI of 2026-12-01).
        "vgpu_stack_wait_timeout": 540,
        **extra,
    }
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(cluster.REPO_ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([str(work / "collections"), str(cluster.REPO_ROOT / ".collections")]),
        ANSIBLE_NOCOLOR="1",
    )
    binary = str(Path(sys.executable).parent / "ansible-playbook")
    args = [binary, "-i", str(work / "inventory.yml"), str(work / "play.yml")]
    return subprocess.run(
        [*args, "-e", json.dumps(settings)], env=env, capture_output=True, text=True, timeout=900, check=False
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output


STACK = """
    - name: The stack
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu_stack
"""
UNINSTALL = """
    - name: The stack's uninstall
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu_stack
        tasks_from: uninstall.yml
"""
PREFLIGHT = """
    - name: Preflight, as upgrade.yml and stack.yml run it first
      ansible.builtin.include_role:
        name: vgpu.isolation.preflight
"""
INFO = """
    - name: The cluster check
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu_stack
        tasks_from: cluster_info.yml
    - name: Keep what it found
      ansible.builtin.copy:
        content: "{{ vgpu_stack_cluster | to_json }}"
        dest: "{{ playbook_dir }}/cluster.json"
        mode: "0644"
"""


@pytest.fixture(scope="module")
def gpu_node(core: Any) -> Iterator[str]:
    """A kwok node that is control plane and GPU node, with 2 x 12 GiB advertised."""
    name = f"vgpu-day2-{uuid.uuid4().hex[:6]}"
    gpus = [cluster.GPU_12GIB, cluster.GPU_12GIB]
    body = cluster.node_body(name, gpus, {"node-role.kubernetes.io/control-plane": ""})
    core.create_node(body)
    cluster.wait_for(f"{name} Ready", lambda: cluster.node_ready(core.read_node(name)), timeout=60)
    yield name
    core.delete_node(name)


@pytest.fixture(scope="module")
def stacked(tmp_path_factory: pytest.TempPathFactory, gpu_node: str) -> Iterator[Path]:
    """The stack applied by the role, the kwok node labelled as the inventory's GPU node (MPS on)."""
    work = tmp_path_factory.mktemp("day2")
    ok(playbook(work, STACK, gpu_node))
    yield work
    ok(playbook(work, UNINSTALL, gpu_node))


def harness_extender(work: Path) -> dict[str, Any]:
    """The settings that reach the harness's extender as kube-scheduler does: mutual TLS with the
    harness's certificates (named as the role names its own), or plain HTTP where the harness runs
    it plain (VGPU_E2E_EXTENDER_TLS=0)."""
    if (cluster.STATE_DIR / "extender-plain").exists():
        return {"vgpu_extender_tls": False}
    tls = work / "harness-tls"
    tls.mkdir(exist_ok=True)
    pki = cluster.STATE_DIR / "pki"
    names = {"client.crt": "scheduler-extender-client.crt", "client.key": "scheduler-extender-client.key"}
    for name, source in {**names, "ca.crt": "extender-ca.crt"}.items():
        if not (tls / name).exists():
            (tls / name).symlink_to(pki / source)
    return {"vgpu_extender_tls": True, "vgpu_extender_tls_dir": str(tls)}


def test_the_cluster_check_finds_every_component_on_the_gpu_node(stacked: Path, gpu_node: str) -> None:
    """verify_cluster.yml's read: the device plugin, the monitor and (MPS on) nvidia-mps and the
    extender Running on the node, 2 x 122 units advertised, the extender answering."""
    ok(playbook(stacked, INFO, gpu_node, **harness_extender(stacked)))
    found = json.loads((stacked / "cluster.json").read_text())
    on_node = [p for p in found["problems"] if gpu_node in p]
    assert on_node == [], on_node
    assert found["extender"]["reachable"] is True
    for name in ("nvidia-shared-device-plugin", "cgpu-monitor", "nvidia-mps", "gpushare-scheduler-extender"):
        assert found["components"][name]["nodes"].get(gpu_node) == "Running", (name, found["components"][name])
    (memory,) = [n for n in found["nodes"] if n["name"] == gpu_node]
    assert memory["allocatable_units"] == 2 * (cluster.GPU_12GIB // cluster.UNIT_MIB)


def test_the_cluster_check_fails_where_the_tenant_pod_policy_is_unbound_or_missing(
    stacked: Path, gpu_node: str
) -> None:
    """Issue 40 item 4: verify_cluster.yml's read says so where the tenant pod policy's binding or the
    policy itself is gone (someone deleted it, a restore left it out), and is clean with both back."""
    admission: Any = client.AdmissionregistrationV1Api(cluster.api_client())
    name = "vgpu-tenant-pods"
    policy = admission.read_validating_admission_policy(name)
    binding = admission.read_validating_admission_policy_binding(name)

    def problems() -> list[str]:
        ok(playbook(stacked, INFO, gpu_node, **harness_extender(stacked)))
        found = json.loads((stacked / "cluster.json").read_text())
        return [p for p in found["problems"] if name in p]

    def restore(obj: Any, create: Any) -> None:
        body = admission.api_client.sanitize_for_serialization(obj)
        body["metadata"] = {"name": name, "labels": body["metadata"].get("labels")}
        body.pop("status", None)
        create(body)

    assert problems() == []
    admission.delete_validating_admission_policy_binding(name)
    try:
        (unbound,) = problems()
        assert "has no binding that denies" in unbound, unbound
        admission.delete_validating_admission_policy(name)
        try:
            assert any("admission policy vgpu-tenant-pods is missing" in p for p in problems())
        finally:
            restore(policy, admission.create_validating_admission_policy)
    finally:
        restore(binding, admission.create_validating_admission_policy_binding)
    assert problems() == []


SAMPLE = (
    INFO
    + """
    - name: The reference sample pod, as verify_cluster.yml runs it
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu_stack
        tasks_from: sample.yml
    - name: Keep what the sample found
      ansible.builtin.copy:
        content: "{{ vgpu_stack_sample | to_json }}"
        dest: "{{ playbook_dir }}/sample.json"
        mode: "0644"
"""
)


def test_a_sample_quota_no_gpu_offers_is_reported_without_starting_the_pod(
    stacked: Path, gpu_node: str, core: Any
) -> None:
    """Issue 25 item 4: the sample pod waited vgpu_stack_sample_timeout (300 s) for a GPU that cannot
    exist. The node's GPUs (12288 MiB each, the device plugin's annotation) offer 122 units of
    100 MiB; a 20000 MiB quota is judged against them before any pod is created."""
    ok(playbook(stacked, SAMPLE, gpu_node, vgpu_sample_app_quota="20000MiB", **harness_extender(stacked)))
    sample = json.loads((stacked / "sample.json").read_text())
    assert sample["phase"] == "not started"
    assert sample["problems"] == [
        f"vgpu_sample_app_quota: 20000 MiB is more than any GPU of the cluster offers: the largest, {gpu_node}'s "
        "GPU 0 with 12288 MiB, offers 122 units of 100 MiB = 12200 MiB (less 0 MiB reserved, the remainder unused); "
        "lower the quota to 12200 MiB or less"
    ]
    assert core.list_namespaced_pod("default", field_selector="metadata.name=vgpu-verify-sample").items == []


def test_a_unit_change_is_refused_while_a_pod_holds_gpu_memory(
    stacked: Path, gpu_node: str, core: Any, namespace: str
) -> None:
    """Issue 14 item 5: a 30-unit pod runs; the role asked for a 200 MiB unit stops before anything
    changes and names the pod; forced, it goes on."""
    pod = cluster.pod_body("holder", 3000, {"kubernetes.io/hostname": gpu_node})
    core.create_namespaced_pod(namespace, pod)
    cluster.wait_bound(core, namespace, "holder")
    refused = playbook(stacked, STACK, gpu_node, vgpu_memory_unit_mib=200)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0
    assert "vgpu_memory_unit_mib would change from 100 MiB to 200 MiB while 1 pod(s) hold GPU memory" in output
    assert f"{namespace}/holder on {gpu_node} (30 units)" in output
    config = core.read_namespaced_config_map("vgpu-config", NS)
    assert "unit_mib: 100" in config.data["config.yaml"], "nothing may change when it is refused"

    # upgrade.yml and stack.yml (and a rerun of site.yml) refuse it in preflight, before any node changes.
    image = stacked / "vgpu-components.tar"
    image.write_bytes(b"")
    early = playbook(
        stacked,
        PREFLIGHT,
        gpu_node,
        vgpu_memory_unit_mib=200,
        preflight_check_network=False,
        vgpu_component_image_tarball=str(image),
    )
    assert early.returncode != 0
    assert "vgpu_memory_unit_mib would change from 100 MiB to 200 MiB while 1 pod(s) hold GPU memory" in (
        early.stdout + early.stderr
    )

    forced = playbook(stacked, STACK, gpu_node, vgpu_memory_unit_mib=200, vgpu_force_unit_change=True)
    ok(forced)
    assert "unit_mib: 200" in core.read_namespaced_config_map("vgpu-config", NS).data["config.yaml"]
    ok(playbook(stacked, STACK, gpu_node, vgpu_force_unit_change=True))  # back to 100 for the other tests


EXTENDER = "gpushare-scheduler-extender"


def test_a_rollout_slower_than_the_wait_that_keeps_moving_is_waited_out(
    stacked: Path, gpu_node: str, core: Any
) -> None:
    """Issue 27: a cold CI run on a loaded machine failed when the forced unit change's extender
    DaemonSet was not Ready within vgpu_stack_wait_timeout (numberReady 0), though nothing was
    broken. Here three more control-plane nodes have a kubelet that takes each pod one step every
    8 s: the extender's rollout onto them takes 9 steps, over 70 s, and never stands still for
    8 s. With vgpu_stack_wait_timeout 40 the role waits while the rollout moves, and succeeds."""
    apps: Any = client.AppsV1Api(core.api_client)
    names = [f"vgpu-slow-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]

    def extender_ready_on_the_slow_nodes() -> bool:
        status = apps.read_namespaced_daemon_set(EXTENDER, NS).status
        return bool(
            status.desired_number_scheduled > len(names) and status.number_ready == status.desired_number_scheduled
        )

    try:
        with slow_kubelet.SlowKubelet(core, names, {"node-role.kubernetes.io/control-plane": ""}) as kubelet:
            cluster.wait_for("the extender Ready on the slow nodes", extender_ready_on_the_slow_nodes, timeout=120)
            kubelet.step, before = 8, kubelet.steps
            slow = playbook(
                stacked,
                STACK,
                gpu_node,
                vgpu_memory_unit_mib=200,
                vgpu_force_unit_change=True,
                vgpu_stack_wait_timeout=40,
            )
            kubelet.step = 0
            ok(slow)
            extender = apps.read_namespaced_daemon_set(EXTENDER, NS)
            status = extender.status
            assert status.updated_number_scheduled == status.number_ready == status.desired_number_scheduled, status
            assert kubelet.steps - before >= 9, "each slow node's pod was replaced step by step"
    finally:  # back to 100 for the other tests, also when the rollout failed
        restored = playbook(stacked, STACK, gpu_node, vgpu_force_unit_change=True)
    ok(restored)


DRAIN = """
    - name: Drain the node as upgrade.yml does before a driver branch changes
      ansible.builtin.include_role:
        name: vgpu.isolation.nvidia_driver
        tasks_from: drain.yml
      vars:
        nvidia_driver_drain_host: localhost
        nvidia_driver_drain_node: "{{ node }}"
    - name: Read the drained node
      kubernetes.core.k8s_info:
        kubeconfig: "{{ vgpu_kubeconfig }}"
        kind: Node
        name: "{{ node }}"
      register: drained
    - name: Keep what it looked like
      ansible.builtin.copy:
        content: "{{ drained.resources[0].spec | to_json }}"
        dest: "{{ playbook_dir }}/drained.json"
        mode: "0644"
    - name: Uncordon it
      ansible.builtin.include_role:
        name: vgpu.isolation.nvidia_driver
        tasks_from: uncordon.yml
      vars:
        nvidia_driver_drain_host: localhost
        nvidia_driver_drain_node: "{{ node }}"
"""


def test_a_drain_stops_at_a_pod_no_controller_would_bring_back(
    stacked: Path, gpu_node: str, core: Any, namespace: str
) -> None:
    """As kubectl drain: a bare pod would be lost, so the drain refuses and names it unless forced."""
    core.create_namespaced_pod(namespace, cluster.pod_body("bare", None, {"kubernetes.io/hostname": gpu_node}))
    cluster.wait_bound(core, namespace, "bare")
    refused = playbook(stacked, DRAIN, gpu_node, node=gpu_node)
    assert refused.returncode != 0
    assert f"{namespace}/bare" in refused.stdout + refused.stderr
    core.patch_node(gpu_node, {"spec": {"unschedulable": None}})


def test_drain_evicts_the_pods_but_the_daemonsets_and_uncordon_lets_pods_back(
    stacked: Path, gpu_node: str, core: Any, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, cluster.pod_body("workload", None, {"kubernetes.io/hostname": gpu_node}))
    cluster.wait_bound(core, namespace, "workload")
    ok(playbook(stacked, DRAIN, gpu_node, node=gpu_node, nvidia_driver_drain_force=True))
    assert json.loads((stacked / "drained.json").read_text())["unschedulable"] is True
    cluster.wait_for(
        "the workload evicted",
        lambda: not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == "workload"] or None,
        timeout=60,
    )
    # kubernetes.core.k8s_drain deletes DaemonSet pods that have an emptyDir (kubernetes.core issue 622;
    # kubectl drain leaves them): their DaemonSet brings them back at once.
    cluster.wait_for(
        "the device plugin back on the node",
        lambda: (
            [p for p in core.list_namespaced_pod(NS, label_selector=PLUGIN).items if p.spec.node_name == gpu_node]
            or None
        ),
        timeout=60,
    )
    assert not core.read_node(gpu_node).spec.unschedulable, "uncordoned at the end"


MONITORING = """
    - name: The monitoring objects where the Prometheus operator's CRDs exist
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu_stack
        tasks_from: monitoring.yml
"""
CRDS = {
    "servicemonitors": "ServiceMonitor",
    "prometheusrules": "PrometheusRule",
}


def prometheus_crd(plural: str, kind: str) -> dict[str, Any]:
    """The Prometheus operator's CRD of `kind`, written minimally (the operator's own schemas are
    large; the API server needs only names, versions and a schema that keeps unknown fields)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def test_monitoring_objects_only_where_the_prometheus_operator_is(stacked: Path, gpu_node: str, core: Any) -> None:
    """Issue 14: a ServiceMonitor, a PrometheusRule and the Grafana dashboard's ConfigMap, rendered
    only when the cluster serves the Prometheus operator's CRDs; without them the role skips them."""
    ext: Any = client.ApiextensionsV1Api(core.api_client)
    custom: Any = client.CustomObjectsApi(core.api_client)
    for plural in CRDS:
        try:
            ext.delete_custom_resource_definition(f"{plural}.monitoring.coreos.com")
        except ApiException as exc:
            if exc.status != 404:
                raise
    cluster.wait_for(
        "no Prometheus operator CRDs",
        lambda: (
            not [c for c in ext.list_custom_resource_definition().items if c.spec.group == "monitoring.coreos.com"]
            or None
        ),
        timeout=60,
    )
    without = ok(playbook(stacked, MONITORING, gpu_node))
    assert "No Prometheus operator here" in without
    names = [c.metadata.name for c in core.list_namespaced_config_map(NS).items]
    assert "vgpu-grafana-dashboard" not in names

    for plural, kind in CRDS.items():
        ext.create_custom_resource_definition(prometheus_crd(plural, kind))
    cluster.wait_for(
        "the CRDs established",
        lambda: (
            all(
                any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))
                for crd in (ext.read_custom_resource_definition(f"{p}.monitoring.coreos.com") for p in CRDS)
            )
            or None
        ),
        timeout=60,
    )
    try:
        first = ok(playbook(stacked, MONITORING, gpu_node))
        assert recap.changed_count(first) > 0
        again = ok(playbook(stacked, MONITORING, gpu_node))
        assert recap.changed_count(again) == 0, "a rerun must change nothing"

        group = ("monitoring.coreos.com", "v1", NS)
        monitor = custom.get_namespaced_custom_object(*group, "servicemonitors", "cgpu-monitor")
        assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "cgpu-monitor"}
        assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
        rule = custom.get_namespaced_custom_object(*group, "prometheusrules", "vgpu-isolation")
        alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
        assert {"VgpuQuotaNearlyFull", "VgpuMonitorDown"} <= set(alerts)
        dashboard = core.read_namespaced_config_map("vgpu-grafana-dashboard", NS)
        assert dashboard.metadata.labels["grafana_dashboard"] == "1"
        shipped = json.loads((cluster.REPO_ROOT / "files/components/dashboards/cgpu-monitor.json").read_text())
        assert json.loads(dashboard.data["cgpu-monitor.json"]) == shipped
    finally:
        for plural in CRDS:
            ext.delete_custom_resource_definition(f"{plural}.monitoring.coreos.com")
        core.delete_namespaced_config_map("vgpu-grafana-dashboard", NS)
