"""vgpu_k8s_apply and vgpu_cluster_facts against a real kube-apiserver.

Runs only when VGPU_TEST_KUBECONFIG names the admin kubeconfig of a real (disposable) API server,
for example the control plane of tests/k8s (`make -C tests/k8s up`,
VGPU_TEST_KUBECONFIG=build/k8s/admin.kubeconfig); otherwise every test here is skipped. No fake:
the API server validates the rendered manifests, computes the server-side apply and authorizes
the components' service accounts with the RBAC the stack deploys.
"""

import datetime
import os
import subprocess
import uuid

import pytest
import yaml
from ansible_collections.vgpu.isolation.plugins.module_utils.k8s_client import K8sApi
from ansible_collections.vgpu.isolation.plugins.modules import vgpu_cluster_facts, vgpu_k8s_apply
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from role_render import render

KUBECONFIG = os.environ.get("VGPU_TEST_KUBECONFIG")
pytestmark = pytest.mark.skipif(not KUBECONFIG, reason="VGPU_TEST_KUBECONFIG names no API server")


def params(**overrides):
    base = {key: spec.get("default") for key, spec in vgpu_k8s_apply.ARGUMENT_SPEC.items()}
    base.update(kubeconfig=KUBECONFIG, wait_timeout=60)
    base.update(overrides)
    return base


@pytest.fixture(scope="module")
def api():
    return K8sApi(KUBECONFIG)


@pytest.fixture(scope="module")
def nodes(api):
    """Two Node objects of our own (no kubelet behind them), removed afterwards."""
    names = [f"vgpu-live-{uuid.uuid4().hex[:6]}-{i}" for i in (1, 2)]
    for name in names:
        api.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}, "vgpu-test")
    yield names
    for name in names:
        api.delete("v1", "Node", name)


@pytest.fixture(scope="module")
def stack(tmp_path_factory, nodes):
    """The manifests as a kubeadm run renders them (RuntimeClass included), for our two nodes."""
    gpu_nodes = [{"name": nodes[0], "mps": False}, {"name": nodes[1], "mps": True}]
    return render(
        tmp_path_factory.mktemp("live"), {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_stack_gpu_nodes": gpu_nodes}
    )


def test_manifests_apply_then_reapply_unchanged_and_delete(api, stack):
    definition = stack["components.yaml"]
    try:
        first = vgpu_k8s_apply.run(api, params(definition=definition), check_mode=False)
        assert {o["result"] for o in first["objects"]} <= {"created", "configured"}
        again = vgpu_k8s_apply.run(api, params(definition=definition), check_mode=False)
        assert again["changed"] is False, [o for o in again["objects"] if o["result"] != "unchanged"]

        changed = [dict(d) for d in definition]
        for doc in changed:
            if doc["kind"] == "ConfigMap":
                doc["data"] = {"config.yaml": doc["data"]["config.yaml"] + "# edited\n"}
        predicted = vgpu_k8s_apply.run(api, params(definition=changed), check_mode=True)
        assert {o["ref"] for o in predicted["objects"] if o["result"] == "configured"} == {
            "ConfigMap/kube-system/vgpu-config"
        }
        live = api.get("v1", "ConfigMap", "vgpu-config", "kube-system")
        assert "# edited" not in live["data"]["config.yaml"], "check mode must not write"
    finally:
        removed = vgpu_k8s_apply.run(api, params(definition=definition, state="absent"), check_mode=False)
    assert {o["result"] for o in removed["objects"]} == {"deleted"}


def test_labels_patch_onto_registered_nodes_and_come_off_again(api, stack, nodes):
    labels = stack["node-labels.yaml"]
    first = vgpu_k8s_apply.run(api, params(definition=labels, state="patched"), check_mode=False)
    assert first["changed"] is True
    assert api.get("v1", "Node", nodes[1])["metadata"]["labels"]["vgpu.io/mps"] == "true"
    again = vgpu_k8s_apply.run(api, params(definition=labels, state="patched"), check_mode=False)
    assert again["changed"] is False
    removal = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"vgpu.io/gpu-node": None}}}
        for n in nodes
    ]
    vgpu_k8s_apply.run(api, params(definition=removal, state="patched"), check_mode=False)
    assert "vgpu.io/gpu-node" not in (api.get("v1", "Node", nodes[0])["metadata"].get("labels") or {})


def allowed(api, account, verb, resource, *, namespace="", subresource="", group=""):
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:kube-system:{account}",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
            "resourceAttributes": {
                "verb": verb,
                "resource": resource,
                "subresource": subresource,
                "namespace": namespace,
                "group": group,
            },
        },
    }
    return api.create(review)["status"]["allowed"]


def test_each_service_account_gets_what_it_needs_and_nothing_more(api, stack):
    definition = stack["components.yaml"]
    vgpu_k8s_apply.run(api, params(definition=definition), check_mode=False)
    try:
        assert allowed(api, "nvidia-shared-device-plugin", "patch", "nodes")
        assert allowed(api, "nvidia-shared-device-plugin", "create", "events", namespace="default")
        assert allowed(api, "nvidia-shared-device-plugin", "get", "nodes")
        assert not allowed(api, "nvidia-shared-device-plugin", "list", "pods")
        assert not allowed(api, "nvidia-shared-device-plugin", "get", "secrets", namespace="kube-system")
        assert allowed(api, "gpushare-scheduler-extender", "watch", "pods")
        assert allowed(api, "gpushare-scheduler-extender", "create", "pods", namespace="default", subresource="binding")
        assert not allowed(api, "gpushare-scheduler-extender", "delete", "pods", namespace="default")
        assert not allowed(api, "cgpu-monitor", "list", "pods")
        assert not allowed(api, "nvidia-mps", "get", "nodes")
    finally:
        vgpu_k8s_apply.run(api, params(definition=definition, state="absent"), check_mode=False)


def test_cluster_facts_reports_nodes_without_running_components(api, nodes):
    facts_params = {key: spec.get("default") for key, spec in vgpu_cluster_facts.ARGUMENT_SPEC.items()}
    facts_params.update(gpu_nodes=nodes, check_extender=False)
    result = vgpu_cluster_facts.run(api, facts_params, False)
    assert result["healthy"] is False
    assert f"nvidia-shared-device-plugin is not running on {nodes[0]} (no pod)" in result["problems"]
    assert f"GPU node {nodes[0]} advertises no vgpu.io/gpu-memory" in result["problems"]


@pytest.mark.skipif(not os.environ.get("VGPU_TEST_KWOK"), reason="VGPU_TEST_KWOK: no kwok manages fake nodes")
def test_components_roll_out_on_a_simulated_gpu_node(api, tmp_path):
    """A kwok-managed node (tests/k8s runs kwok for nodes annotated kwok.x-k8s.io/node=fake) that is
    both control plane and GPU node: the wait returns once all DaemonSets run there, and
    vgpu_cluster_facts then finds every component and the advertised memory."""
    name = f"vgpu-kwok-{uuid.uuid4().hex[:6]}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": name},
        },
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "vgpu.io/gpu-memory": "240"},
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "vgpu.io/gpu-memory": "240"},
        },
    }
    api.create(node)
    stack = render(
        tmp_path,
        {"vgpu_kubernetes_flavour": "kubeadm", "vgpu_stack_gpu_nodes": [{"name": name, "mps": True}]},
    )
    try:
        vgpu_k8s_apply.run(api, params(definition=stack["node-labels.yaml"], state="patched"), check_mode=False)
        applied = vgpu_k8s_apply.run(
            api, params(definition=stack["components.yaml"], wait=True, wait_timeout=180), check_mode=False
        )
        assert "failed" not in applied, applied.get("msg")
        assert {state["ref"] for state in applied["rollout"] if state["ready"]} == {
            "DaemonSet/kube-system/nvidia-shared-device-plugin",
            "DaemonSet/kube-system/cgpu-monitor",
            "DaemonSet/kube-system/nvidia-mps",
            "DaemonSet/kube-system/gpushare-scheduler-extender",
        }
        facts_params = {key: spec.get("default") for key, spec in vgpu_cluster_facts.ARGUMENT_SPEC.items()}
        facts_params.update(gpu_nodes=[name], check_extender=False)
        facts = vgpu_cluster_facts.run(api, facts_params, False)
        on_node = [p for p in facts["problems"] if name in p]
        assert on_node == [], on_node
        assert facts["components"]["nvidia-mps"]["nodes"] == {name: "Running"}
        assert [n["allocatable_mib"] for n in facts["nodes"]] == [24000]
    finally:
        vgpu_k8s_apply.run(api, params(definition=stack["components.yaml"], state="absent"), check_mode=False)
        api.delete("v1", "Node", name)


KUBE_SCHEDULER = os.environ.get("VGPU_TEST_KUBE_SCHEDULER")


def write_certificates(folder):
    """A self-signed CA and a client certificate and key of it, in roles/vgpu_stack's file names."""
    folder.mkdir()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (folder / "ca.crt").write_bytes(pem)
    (folder / "client.crt").write_bytes(pem)
    (folder / "client.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@pytest.mark.skipif(not KUBE_SCHEDULER, reason="VGPU_TEST_KUBE_SCHEDULER names no kube-scheduler binary")
@pytest.mark.parametrize("flavour", ["k3s", "kubeadm"])
def test_kube_scheduler_accepts_the_configuration(tmp_path, flavour):
    """The real kube-scheduler loads the rendered file (strict decoding) and writes back its extender,
    with the mutual-TLS files it opens when it builds the extender (made here, not by the role)."""
    tls = tmp_path / "tls"
    write_certificates(tls)
    rendered = render(tmp_path, {"vgpu_kubernetes_flavour": flavour, "vgpu_stack_tls_dir": str(tls)})
    (config,) = rendered["kube-scheduler-config.yaml"]
    # kube-scheduler opens the kubeconfig the file names; point it at the test API server's.
    config["clientConnection"]["kubeconfig"] = KUBECONFIG
    source = tmp_path / "in.yaml"
    source.write_text(yaml.safe_dump(config))
    written = tmp_path / "out.yaml"
    proc = subprocess.run(
        [str(KUBE_SCHEDULER), "--config", str(source), "--write-config-to", str(written)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (extender,) = yaml.safe_load(written.read_text())["extenders"]
    assert extender["urlPrefix"] == "https://127.0.0.1:32766"
    assert extender["tlsConfig"]["certFile"] == str(tls / "client.crt")
    assert extender["managedResources"] == [{"name": "vgpu.io/gpu-memory"}, {"name": "vgpu.io/gpu-cores"}]

    config["extenders"][0]["bogusField"] = True
    source.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [str(KUBE_SCHEDULER), "--config", str(source), "--write-config-to", str(written)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "bogusField" in proc.stderr
