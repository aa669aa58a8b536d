"""The stack role and the cluster module against the real API server, and RBAC as the components.

roles/vgpu_stack runs through ansible-playbook (the collection is the working tree) with its
image import and kube-scheduler restart switched off (no containerd or static pods here); it
applies the manifests with kubernetes.core.k8s (server-side apply) in this machine's Python. The
components' service accounts then get real tokens (TokenRequest) and act with them: the extender
schedules a pod end to end, the device plugin annotates a node, and anything beyond their roles is
refused by the API server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from fakes import GPUS, FakeGpus, cgroup_of
from kubernetes import client
from kubernetes.client.rest import ApiException
from role_render import render  # tests/unit, on the path through tests/conftest.py
from vgpu_components import config, kube
from vgpu_components.enforcement import Enforcer

from tests import recap
from tests.k8s import api_proxy, cluster

NS = "kube-system"
# A tenant namespace the operator exempts from the tenant pod policy (vgpu_tenant_pod_policy_exempt_namespaces).
EXEMPT_NS = "e2e-trusted"
EXTENDER_SA = "gpushare-scheduler-extender"
PLUGIN_SA = "nvidia-shared-device-plugin"
PLAYBOOK = """\
- name: Apply the vgpu stack to the e2e control plane
  hosts: k8s_control_plane
  gather_facts: true
  roles:
    - role: vgpu.isolation.vgpu_stack
  # The harness's extender speaks mTLS with the harness's own CA (tests/k8s/scripts/lib.sh): the
  # plain configurations run against it restarted plain, the mutual-TLS one (the role's default)
  # against it restarted with the role's certificates.
  post_tasks:
    - name: Render the kube-scheduler configuration the role ships, with mutual TLS
      ansible.builtin.template:
        src: "{repo}/roles/vgpu/templates/kube-scheduler-config.yaml.j2"
        dest: "{out}/kube-scheduler-config-tls.yaml"
        mode: "0644"
    - name: Render the kube-scheduler configuration the role ships
      ansible.builtin.template:
        src: "{repo}/roles/vgpu/templates/kube-scheduler-config.yaml.j2"
        dest: "{out}/kube-scheduler-config.yaml"
        mode: "0644"
      vars:
        vgpu_extender_tls: false
    - name: Render it with the other packing, weighted
      ansible.builtin.template:
        src: "{repo}/roles/vgpu/templates/kube-scheduler-config.yaml.j2"
        dest: "{out}/kube-scheduler-config-weighted.yaml"
        mode: "0644"
      vars:
        vgpu_extender_packing: weighted
        vgpu_extender_tls: false
"""


def run_playbook(work: Path, overrides: dict[str, Any] | None = None) -> str:
    """Run the role once (with `overrides` of its variables); returns ansible-playbook's output (the
    test fails on a non-zero exit)."""
    collections = work / "collections" / "ansible_collections" / "vgpu"
    collections.mkdir(parents=True, exist_ok=True)
    if not (collections / "isolation").exists():
        (collections / "isolation").symlink_to(cluster.REPO_ROOT)
    inventory = work / "inventory.yml"
    inventory.write_text(
        "k8s_control_plane:\n  hosts:\n    localhost:\n"
        f"      ansible_connection: local\n      ansible_python_interpreter: {sys.executable}\n"
    )
    playbook = work / "stack.yml"
    playbook.write_text(PLAYBOOK.format(repo=cluster.REPO_ROOT, out=work))
    extra = {
        "vgpu_kubernetes_flavour": "kubeadm",
        "vgpu_kubeconfig": str(cluster.STATE_DIR / "admin.kubeconfig"),
        "vgpu_scheduler_kubeconfig": str(cluster.STATE_DIR / "scheduler.kubeconfig"),
        "vgpu_extender_port": cluster.extender_port(),
        "vgpu_stack_manifest_dir": str(work / "manifests"),
        # The certificates go to the test's folder, never to this machine's /etc/vgpu/tls.
        "vgpu_extender_tls_dir": str(work / "tls"),
        "vgpu_extender_tls_install_python": False,
        "vgpu_component_image_import": False,
        "vgpu_scheduler_manage": False,
        "vgpu_stack_install_python_client": False,
        # The Kubernetes modules run in this machine's virtualenv, which has the client.
        "vgpu_kubernetes_client_venv": sys.prefix,
        "vgpu_stack_label_nodes": False,
        "vgpu_stack_wait": True,
        "vgpu_stack_wait_timeout": 300,
        # The tenant pod policy's exemptions as an operator names them (tests/k8s/test_tenant_pods.py).
        "vgpu_tenant_pod_policy_exempt_namespaces": ["kube-system", EXEMPT_NS],
        **(overrides or {}),
    }
    args = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook)]
    for key, value in extra.items():
        # key=value for the plain values; JSON keeps booleans, lists and strings with blanks or quotes whole.
        plain = not isinstance(value, (bool, list, dict)) and not any(c in str(value) for c in " '\"")
        args += ["-e", f"{key}={value}" if plain else json.dumps({key: value})]
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(cluster.REPO_ROOT / "ansible.cfg"),
        # community.crypto (the role's certificates) from the collections `make collection` unpacks.
        ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([str(work / "collections"), str(cluster.REPO_ROOT / ".collections")]),
        ANSIBLE_NOCOLOR="1",
    )
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"ansible-playbook failed ({done.returncode}):\n{output[-6000:]}"
    return output


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("stack")
    first = run_playbook(work)
    yield work
    remove_components()
    assert "changed=" in first


def remove_components() -> None:
    """The other tests expect no component pods: the DaemonSets would place some on their nodes."""
    api = cluster.api_client()
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    for name in (EXTENDER_SA, PLUGIN_SA, "cgpu-monitor", "nvidia-mps"):
        for delete in (apps.delete_namespaced_daemon_set, core.delete_namespaced_service_account):
            try:
                delete(name, NS)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def sa_client(core: Any, name: str, work: Path) -> Any:
    token = core.create_namespaced_service_account_token(name, NS, {"spec": {"expirationSeconds": 3600}}).status.token
    return cluster.api_client(cluster.token_kubeconfig(work / f"{name}.kubeconfig", token))


def forbidden(call: Any, *args: Any, **kwargs: Any) -> bool:
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        return exc.status == 403
    return False


def test_the_role_applies_the_manifests_and_a_rerun_changes_nothing(stack: Path, core: Any) -> None:
    apps: Any = client.AppsV1Api(cluster.api_client())
    daemonsets = {d.metadata.name for d in apps.list_namespaced_daemon_set(NS).items}
    assert {EXTENDER_SA, PLUGIN_SA, "cgpu-monitor", "nvidia-mps"} <= daemonsets, daemonsets
    accounts = {a.metadata.name for a in core.list_namespaced_service_account(NS).items}
    assert {EXTENDER_SA, PLUGIN_SA} <= accounts, accounts
    config = core.read_namespaced_config_map("vgpu-config", NS)
    assert f"port: {cluster.extender_port()}" in next(iter(config.data.values()))
    assert recap.changed_count(run_playbook(stack)) == 0, "a second run of the role reported changes"


def test_a_status_written_during_a_rerun_is_no_change_of_the_roles(stack: Path) -> None:
    """A controller writes a component's status whenever it likes: the DaemonSet controller does each
    time a pod's readiness changes, and on a real site that may fall between the role's read of a
    DaemonSet and its apply. That is no change the role made, and a rerun still reports changed=0.
    (Found on the three-node site, issue 27: a second `make site` reported changed=1 on `Apply the
    components`, about one run in six.) The proxy writes the status at exactly that moment."""
    apps: Any = client.AppsV1Api(cluster.api_client())
    written: list[str] = []

    def status_between_read_and_apply(method: str, path: str, headers: Mapping[str, str]) -> None:
        applying = method == "PATCH" and headers.get("Content-Type", "").startswith("application/apply-patch")
        if applying and "/daemonsets/" in path and not written:
            name = urlsplit(path).path.rsplit("/", 1)[1]
            current = apps.read_namespaced_daemon_set_status(name, NS).status
            misscheduled = (current.number_misscheduled or 0) + 7
            apps.patch_namespaced_daemon_set_status(name, NS, {"status": {"numberMisscheduled": misscheduled}})
            written.append(name)

    with api_proxy.proxy(stack / "proxy.kubeconfig", status_between_read_and_apply) as kubeconfig:
        output = run_playbook(stack, {"vgpu_kubeconfig": str(kubeconfig)})
    assert written, "the rerun applied no DaemonSet through the proxy"
    assert recap.changed_count(output) == 0, (
        f"the status written to {written[0]} counted as the role's change, in {recap.changed_tasks(output)}"
    )


def two_big_pods_get_two_gpus(core: Any, namespace: str, gpu_nodes: cluster.NodeFactory) -> None:
    """Two 8000 MiB pods on one node of 2 x 12 GiB GPUs are scheduled, each on its own GPU."""
    selector = gpu_nodes(1)
    for name in ("a", "b"):
        core.create_namespaced_pod(namespace, cluster.pod_body(name, 8000, selector))
    pods = [cluster.wait_bound(core, namespace, name) for name in ("a", "b")]
    gpus = {p.metadata.annotations[cluster.ANNOTATION_UUID] for p in pods}
    assert len(gpus) == 2, f"both 8000 MiB pods on one GPU: {gpus}"


def test_extender_schedules_with_only_its_service_account(
    stack: Path, core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, extender_back_up: None
) -> None:
    api = sa_client(core, EXTENDER_SA, stack)
    sa_core = client.CoreV1Api(api)
    assert forbidden(sa_core.list_namespaced_secret, NS), "the extender's account can read secrets"
    assert forbidden(sa_core.delete_collection_namespaced_pod, namespace), "the extender's account can delete pods"
    assert forbidden(sa_core.patch_node, "any", {"metadata": {"labels": {"x": "y"}}}), "it can patch nodes"
    assert forbidden(sa_core.patch_namespaced_pod, "any", namespace, {"metadata": {"labels": {"x": "y"}}}), (
        "it can patch pods (issue 12 finding 8: the GPU travels in the Binding)"
    )

    cluster.ctl("stop-extender")
    cluster.ctl("start-extender", env={"VGPU_E2E_EXTENDER_KUBECONFIG": str(stack / f"{EXTENDER_SA}.kubeconfig")})
    two_big_pods_get_two_gpus(core, namespace, gpu_nodes)
    cluster.ctl("stop-extender")  # extender_back_up restarts it with the admin identity


def plugin_pod_client(core: Any, node: str, work: Path, account: str = PLUGIN_SA) -> Any:
    """A client with the token a pod of ``account`` (the device plugin's) on ``node`` gets: bound to
    the pod, so it names the node. The pod is plugin-token-<node>."""
    name = f"plugin-token-{node}"
    try:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    except ApiException as exc:
        if exc.status != 404:
            raise
    body = {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "c", "image": "localhost/none"}],
        },
    }
    for _attempt in range(30):  # the previous pod of this name may still be going
        try:
            pod = core.create_namespaced_pod(NS, body)
            break
        except ApiException as exc:
            if exc.status != 409:
                raise
            time.sleep(1)
    bound = {"kind": "Pod", "apiVersion": "v1", "name": name, "uid": pod.metadata.uid}
    request = {"spec": {"expirationSeconds": 3600, "boundObjectRef": bound}}
    token = core.create_namespaced_service_account_token(account, NS, request).status.token
    return client.CoreV1Api(cluster.api_client(cluster.token_kubeconfig(work / f"{name}.kubeconfig", token)))


def denied(call: Any, *args: Any, **kwargs: Any) -> str:
    """The API server's refusal message (403), or '' when the call went through."""
    try:
        call(*args, **kwargs)
    except ApiException as exc:
        assert exc.status == 403, exc
        return str(exc.body)
    return ""


def test_device_plugin_account_may_annotate_its_own_node_and_nothing_more(
    stack: Path, core: Any, gpu_nodes: cluster.NodeFactory
) -> None:
    """Issue 12 finding 8: RBAC lets the account patch any node; the admission policy narrows that to
    the gpus annotation of the node its pod runs on, as kubelet's NodeRestriction does for kubelets."""
    selector = gpu_nodes(2)
    own, other = sorted(
        n.metadata.name for n in core.list_node(label_selector=",".join(f"{k}={v}" for k, v in selector.items())).items
    )
    sa_core = plugin_pod_client(core, own, stack)
    try:
        check_own_node_only(core, sa_core, own, other, stack)
    finally:
        core.delete_namespaced_pod(f"plugin-token-{own}", NS, grace_period_seconds=0)


def check_own_node_only(core: Any, sa_core: Any, own: str, other: str, stack: Path) -> None:
    key = f"{cluster.PREFIX}/gpus"
    # It reads its node's labels: the <prefix>/mps label turns MPS on for that node (issue 14 item 1).
    assert isinstance(sa_core.read_node(own).metadata.labels, dict)
    sa_core.patch_node(own, {"metadata": {"annotations": {key: cluster.gpus_annotation(own, [80000])}}})
    assert "80000" in core.read_node(own).metadata.annotations[key]

    message = denied(
        sa_core.patch_node, other, {"metadata": {"annotations": {key: cluster.gpus_annotation(other, [1])}}}
    )
    assert "may change only the node its pod runs on" in message, message
    assert "may change only the" in denied(sa_core.patch_node, own, {"metadata": {"labels": {"x": "y"}}})
    assert denied(sa_core.patch_node, own, {"metadata": {"annotations": {"other": "x"}}})
    assert denied(sa_core.patch_node, own, {"spec": {"unschedulable": True}})

    unbound = client.CoreV1Api(sa_client(core, PLUGIN_SA, stack))  # a token of no pod names no node
    assert denied(unbound.patch_node, own, {"metadata": {"annotations": {key: "{}"}}})
    assert forbidden(sa_core.list_namespaced_secret, NS), "the device plugin's account can read secrets"
    assert forbidden(sa_core.delete_node, own), "the device plugin's account can delete nodes"
    assert forbidden(sa_core.patch_namespaced_pod, "x", "default", {}), "it can patch pods"


def test_cgpu_monitor_evicts_only_pods_on_its_own_node(
    stack: Path, core: Any, namespace: str, gpu_nodes: cluster.NodeFactory
) -> None:
    """Issue 28 finding 4: RBAC let the monitor's account evict any pod of the cluster. With the
    token its pod on one node gets, the monitor's own eviction call (kube.KubePodApi.evict) takes
    that node's pod and is refused another node's; a token bound to no pod names no node and
    evicts nothing."""
    selector = gpu_nodes(2)
    own, other = sorted(
        n.metadata.name for n in core.list_node(label_selector=",".join(f"{k}={v}" for k, v in selector.items())).items
    )
    pods = {}
    for node in (own, other):
        body = cluster.pod_body(f"on-{node}", None, {"kubernetes.io/hostname": node})
        body["spec"]["nodeName"] = node
        pods[node] = core.create_namespaced_pod(namespace, body).metadata.uid
    token = plugin_pod_client(core, own, stack, account="cgpu-monitor").api_client
    monitor = kube.KubePodApi(token, "cgpu-monitor", own)
    try:
        message = denied(monitor.evict, namespace, f"on-{other}", pods[other])
        assert "cgpu-monitor may evict only pods on the node its pod runs on" in message, message
        unbound = kube.KubePodApi(sa_client(core, "cgpu-monitor", stack), "cgpu-monitor", own)
        assert denied(unbound.evict, namespace, f"on-{own}", pods[own])
        monitor.evict(namespace, f"on-{own}", pods[own])
        cluster.wait_for(
            "the pod on its own node evicted",
            lambda: (
                not [p for p in core.list_namespaced_pod(namespace).items if p.metadata.name == f"on-{own}"]
                or core.read_namespaced_pod(f"on-{own}", namespace).metadata.deletion_timestamp is not None
            ),
            timeout=30,
        )
        assert core.read_namespaced_pod(f"on-{other}", namespace).metadata.deletion_timestamp is None
    finally:
        core.delete_namespaced_pod(f"plugin-token-{own}", NS, grace_period_seconds=0)


def test_the_monitor_evicts_a_pod_without_units_that_holds_gpu_memory_with_its_own_identity(
    stack: Path, core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, tmp_path: Path
) -> None:
    """Issue 28 finding 2 end to end: the real Enforcer, with the token its pod on the node gets and
    the role's RBAC and admission policy, holds a pod that asks for no GPU memory to a quota of 0:
    an Event, then the pod evicted. NVML is the component tests' fake (no GPU here), /proc a
    folder with the pod's process; kubelet's PodResources lists no GPU memory for it (no quota)."""
    (own,) = [
        n.metadata.name
        for n in core.list_node(label_selector=",".join(f"{k}={v}" for k, v in gpu_nodes(1).items())).items
    ]
    body = cluster.pod_body("no-units", None, {"kubernetes.io/hostname": own})
    body["spec"]["nodeName"] = own
    core.create_namespaced_pod(namespace, body)
    cluster.wait_for(
        "no-units Running",
        lambda: core.read_namespaced_pod("no-units", namespace).status.phase == "Running",
        timeout=60,
    )
    pod = core.api_client.sanitize_for_serialization(core.read_namespaced_pod("no-units", namespace))
    backend = FakeGpus(GPUS)
    backend.process_mib[GPUS[0].uuid][4242] = 700
    cgroup_of(tmp_path / "proc", 4242, pod, "c" * 64)
    cfg = config.load(None, environ={})
    cfg["monitor"]["grace_seconds"] = 1.0
    token = plugin_pod_client(core, own, stack, account="cgpu-monitor").api_client
    try:
        enforcer = Enforcer(
            cfg, own, backend, kube.KubePodApi(token, "cgpu-monitor", own), tmp_path / "proc", quotas=lambda: {}
        )
        assert enforcer.check(now=0) == []
        (violation,) = enforcer.check(now=1)
        assert violation.quota_bytes == 0 and violation.used_bytes == 700 * 2**20
        assert enforcer.actions["evicted"] == 1, enforcer.actions
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=no-units").items
        assert [e.reason for e in events if e.source and e.source.component == "cgpu-monitor"] == ["GPUMemoryOverQuota"]

        def gone() -> bool:
            try:
                return core.read_namespaced_pod("no-units", namespace).metadata.deletion_timestamp is not None
            except ApiException as exc:
                return exc.status == 404

        cluster.wait_for("no-units evicted", gone, timeout=30)
    finally:
        core.delete_namespaced_pod(f"plugin-token-{own}", NS, grace_period_seconds=0)


def test_kube_scheduler_calls_the_extender_over_mutual_tls_with_the_roles_certificates(
    stack: Path, core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, extender_back_up: None
) -> None:
    """Issue 12 finding 7, end to end: the real kube-scheduler with the role's tlsConfig and the
    real extender with the role's certificates (which requires kube-scheduler's client certificate)."""
    tls = stack / "tls"
    plain = (cluster.STATE_DIR / "vgpu-config-plain.yaml").read_text()  # the harness's, without its own TLS
    config = stack / "extender-tls.yaml"
    config.write_text(
        plain.replace(
            "extender:\n",
            "extender:\n"
            f"  tls_cert_file: {tls}/server.crt\n  tls_key_file: {tls}/server.key\n  client_ca_file: {tls}/ca.crt\n",
        )
    )
    assert "tls_cert_file" in config.read_text(), "the harness config has no extender section"
    cluster.ctl("stop-scheduler")
    cluster.ctl("stop-extender")
    try:
        cluster.ctl(
            "start-extender", env={"VGPU_E2E_EXTENDER_CONFIG": str(config), "VGPU_E2E_EXTENDER_TLS_DIR": str(tls)}
        )
        cluster.ctl("start-scheduler", str(stack / "kube-scheduler-config-tls.yaml"))
        two_big_pods_get_two_gpus(core, namespace, gpu_nodes)
    finally:
        cluster.ctl("stop-scheduler")
        cluster.ctl("stop-extender")  # extender_back_up restarts it as the harness runs it
        cluster.ctl("start-scheduler")


@pytest.mark.parametrize("config", ["kube-scheduler-config.yaml", "kube-scheduler-config-weighted.yaml"])
def test_the_shipped_scheduler_configuration_works(
    stack: Path, core: Any, namespace: str, gpu_nodes: cluster.NodeFactory, config: str
) -> None:
    """kube-scheduler started with the role's own KubeSchedulerConfiguration (either packing)
    places GPU pods."""
    # The harness's extender speaks mTLS; a configuration without tlsConfig gets a plain one.
    plain = "urlPrefix: http://" in (stack / config).read_text()
    cluster.ctl("stop-scheduler")
    if plain:
        cluster.ctl("stop-extender")
        cluster.ctl("start-extender", "plain")
    try:
        cluster.ctl("start-scheduler", str(stack / config))
        two_big_pods_get_two_gpus(core, namespace, gpu_nodes)
    finally:
        cluster.ctl("stop-scheduler")
        if plain:
            cluster.ctl("stop-extender")
            cluster.ctl("start-extender")
        cluster.ctl("start-scheduler")


def allowed(core: Any, account: str, verb: str, resource: str, *, namespace: str = "", subresource: str = "") -> bool:
    """Whether the API server's authorizer lets the component's service account do this (SubjectAccessReview)."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{NS}:{account}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{NS}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, subresource=subresource, namespace=namespace
            ),
        )
    )
    authz: Any = client.AuthorizationV1Api(core.api_client)
    return bool(authz.create_subject_access_review(review).status.allowed)


def test_each_service_account_gets_what_it_needs_and_nothing_more(stack: Path, core: Any) -> None:
    assert allowed(core, PLUGIN_SA, "patch", "nodes")
    assert allowed(core, PLUGIN_SA, "create", "events", namespace="default")
    assert allowed(core, PLUGIN_SA, "get", "nodes")
    assert not allowed(core, PLUGIN_SA, "list", "pods")
    assert not allowed(core, PLUGIN_SA, "get", "secrets", namespace=NS)
    assert allowed(core, EXTENDER_SA, "watch", "pods")
    assert allowed(core, EXTENDER_SA, "create", "pods", namespace="default", subresource="binding")
    assert not allowed(core, EXTENDER_SA, "delete", "pods", namespace="default")
    # The monitor's enforcement (issue 12's ground truth): its node's pods, Events on them, and
    # evictions by deleting a pod (vgpu_enforcement: evict, the default), which the role's admission
    # policy holds to its own node (issue 28 finding 4, below); no Eviction API, no secrets.
    assert allowed(core, "cgpu-monitor", "list", "pods")
    assert allowed(core, "cgpu-monitor", "create", "events", namespace="default")
    assert allowed(core, "cgpu-monitor", "delete", "pods", namespace="default")
    assert not allowed(core, "cgpu-monitor", "create", "pods", namespace="default", subresource="eviction")
    assert not allowed(core, "cgpu-monitor", "deletecollection", "pods", namespace="default")
    assert not allowed(core, "cgpu-monitor", "get", "secrets", namespace=NS)
    assert not allowed(core, "nvidia-mps", "get", "nodes")


@pytest.mark.parametrize("flavour", ["k3s", "kubeadm"])
def test_kube_scheduler_accepts_the_configuration_strictly(stack: Path, flavour: str) -> None:
    """The real kube-scheduler loads the file the role renders for each flavour (strict decoding)
    and writes back its extender, with the mutual-TLS files of the role."""
    work = stack / f"strict-{flavour}"
    work.mkdir(exist_ok=True)
    rendered = render(work, {"vgpu_kubernetes_flavour": flavour, "vgpu_extender_tls_dir": str(stack / "tls")})
    (config,) = rendered["kube-scheduler-config.yaml"]
    # kube-scheduler opens the kubeconfig the file names; point it at the test API server's.
    config["clientConnection"]["kubeconfig"] = str(cluster.STATE_DIR / "admin.kubeconfig")
    binary = cluster.BIN_DIR / "kube-scheduler"

    def load(doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        source, written = work / "in.yaml", work / "out.yaml"
        source.write_text(yaml.safe_dump(doc))
        args = [str(binary), "--config", str(source), "--write-config-to", str(written)]
        return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)

    proc = load(config)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (extender,) = yaml.safe_load((work / "out.yaml").read_text())["extenders"]
    assert extender["urlPrefix"] == "https://127.0.0.1:32766"
    assert extender["tlsConfig"]["certFile"] == str(stack / "tls" / "client.crt")
    assert extender["managedResources"] == [{"name": "vgpu.io/gpu-memory"}, {"name": "vgpu.io/gpu-cores"}]
    config["extenders"][0]["bogusField"] = True
    proc = load(config)
    assert proc.returncode != 0 and "bogusField" in proc.stderr
