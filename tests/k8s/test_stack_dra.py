"""roles/vgpu_stack with vgpu_scheduling: dra against the real API server (docs/dra.md).

The role runs as in test_stack.py (no image import, no kube-scheduler restart) but on the dra path:
it applies the DRA driver, its RBAC, admission policy and DeviceClass, deletes the extender path's
components, and a rerun changes nothing. The driver's account then publishes slices with a real
pod-bound token through the driver's own code: its own node's slice is accepted, another node's
and another driver's are refused by the admission policy.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from vgpu_components import dra, kube

from tests import recap
from tests.k8s import cluster, dra_objects
from tests.k8s.test_stack import EXTENDER_SA, NS, PLUGIN_SA, forbidden, plugin_pod_client, run_playbook

DRIVER_SA = "vgpu-dra-driver"
DRA = {"vgpu_scheduling": "dra"}


@pytest.fixture(scope="module")
def dra_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("stack-dra")
    first = run_playbook(work, DRA)
    yield work
    api = cluster.api_client()
    core, apps, resource = client.CoreV1Api(api), client.AppsV1Api(api), client.ResourceV1Api(api)
    deletes: list[tuple[Any, tuple[str, ...]]] = [
        (apps.delete_namespaced_daemon_set, (n, NS)) for n in (DRIVER_SA, "cgpu-monitor", "nvidia-mps")
    ]
    deletes += [(core.delete_namespaced_service_account, (n, NS)) for n in (DRIVER_SA, "cgpu-monitor", "nvidia-mps")]
    deletes.append((resource.delete_device_class, (dra_objects.DRIVER,)))
    # The claim policy would refuse later modules' shared claims (test_dra.py's defence in depth).
    admission = client.AdmissionregistrationV1Api(api)
    deletes.append((admission.delete_validating_admission_policy_binding, ("vgpu-claim-one-consumer",)))
    deletes.append((admission.delete_validating_admission_policy, ("vgpu-claim-one-consumer",)))
    for delete, args in deletes:
        try:
            delete(*args)
        except ApiException as exc:
            if exc.status != 404:
                raise
    assert "changed=" in first


def test_the_dra_path_replaces_the_extender_and_the_device_plugin_and_a_rerun_changes_nothing(
    dra_stack: Path, core: Any
) -> None:
    apps: Any = client.AppsV1Api(cluster.api_client())
    daemonsets = {d.metadata.name for d in apps.list_namespaced_daemon_set(NS).items}
    assert DRIVER_SA in daemonsets and {"cgpu-monitor", "nvidia-mps"} <= daemonsets, daemonsets
    assert not {EXTENDER_SA, PLUGIN_SA} & daemonsets, daemonsets
    accounts = {a.metadata.name for a in core.list_namespaced_service_account(NS).items}
    assert DRIVER_SA in accounts and not {EXTENDER_SA, PLUGIN_SA} & accounts, accounts
    resource: Any = client.ResourceV1Api(cluster.api_client())
    device_class = resource.read_device_class(dra_objects.DRIVER)
    assert device_class.spec.selectors[0].cel.expression == f'device.driver == "{dra_objects.DRIVER}"'
    config = core.read_namespaced_config_map("vgpu-config", NS)
    assert "dra:" in next(iter(config.data.values()))
    assert recap.changed_count(run_playbook(dra_stack, DRA)) == 0, "a second run of the role reported changes"


def test_the_drivers_account_publishes_only_its_own_nodes_slice(
    dra_stack: Path, core: Any, gpu_nodes: cluster.NodeFactory
) -> None:
    """RBAC lets the account write any ResourceSlice; the admission policy narrows that to the
    slices of its own driver on the node its pod runs on."""
    selector = gpu_nodes(2)
    own, other = sorted(
        n.metadata.name for n in core.list_node(label_selector=",".join(f"{k}={v}" for k, v in selector.items())).items
    )
    sa_core = plugin_pod_client(core, own, dra_stack, account=DRIVER_SA)
    admin = dra_objects.dra_api()
    try:
        api = kube.KubeDraApi(sa_core.api_client)
        gpus = [cluster.GPU_12GIB, cluster.GPU_12GIB]
        assert dra_objects.publish_slice(api, own, gpus, dra_stack) is True
        assert dra_objects.publish_slice(api, own, gpus, dra_stack) is False

        with pytest.raises(ApiException) as refused:
            dra_objects.publish_slice(api, other, gpus, dra_stack)
        assert refused.value.status == 403
        assert "may write only the ResourceSlice of the node its pod runs on" in str(refused.value.body)

        # Another driver's slice on its own node.
        body = copy.deepcopy(admin.list_slices(own, dra_objects.DRIVER)[0])
        body["metadata"] = {"name": f"{own}-other.example.com"}
        body["spec"]["driver"] = "other.example.com"
        with pytest.raises(ApiException) as refused:
            api.create_slice(body)
        assert refused.value.status == 403
        assert "may write only ResourceSlices of driver" in str(refused.value.body)

        # Its own slice of another node, made by the admin, cannot be deleted by the driver either.
        assert dra_objects.publish_slice(admin, other, gpus, dra_stack) is True
        with pytest.raises(ApiException) as refused:
            api.delete_slice(dra.slice_name(other, dra_objects.DRIVER))
        assert refused.value.status == 403

        assert forbidden(sa_core.list_namespaced_secret, NS), "the driver's account can read secrets"
        assert forbidden(sa_core.delete_node, own), "the driver's account can delete nodes"
        assert forbidden(sa_core.patch_node, own, {"metadata": {"labels": {"x": "y"}}}), "it can patch nodes"
    finally:
        core.delete_namespaced_pod(f"plugin-token-{own}", NS, grace_period_seconds=0)


def reserve(resource: Any, namespace: str, claim: str, pods: dict[str, str], driver: str = dra_objects.DRIVER) -> str:
    """Write the claim's status as kube-scheduler does when it allocates it and reserves it for
    `pods` (name to uid); returns the API server's refusal ("" when the status was written).
    kube-controller-manager's claim controller writes the status too: a conflict is read again."""
    result = {"request": "gpu", "driver": driver, "pool": "gpu-node", "device": "gpu-0"}
    reserved = [{"resource": "pods", "name": name, "uid": uid} for name, uid in pods.items()]
    while True:
        stored = json.loads(resource.read_namespaced_resource_claim(claim, namespace, _preload_content=False).data)
        stored["status"] = {"allocation": {"devices": {"results": [result]}}, "reservedFor": reserved} if pods else {}
        try:
            resource.replace_namespaced_resource_claim_status(claim, namespace, stored)
        except ApiException as exc:
            if exc.status == 409:
                continue
            assert exc.status in (403, 422), exc
            return str(json.loads(exc.body or "{}").get("message", exc.body))
        return ""


def test_a_claim_of_the_driver_is_reserved_for_one_pod_at_a_time(dra_stack: Path, core: Any, namespace: str) -> None:
    """Issue 40 item 1, at the door: kubelet prepares a claim once per node and hands it to a later
    pod without asking the driver, so the driver's refusal catches only the consumers it sees at that
    first prepare. The role's admission policy refuses the claim's status that kube-scheduler writes
    when it reserves a claim of the driver for a second pod, so that pod is not bound to the claim."""
    resource = client.ResourceV1Api(cluster.api_client())
    spec = dra_objects.claim_template_body("shared", 1000)["spec"]
    for name in ("shared", "other-driver"):
        body: Any = {
            "apiVersion": dra_objects.RESOURCE_API,
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            **spec,
        }
        resource.create_namespaced_resource_claim(namespace, body)

    # Pods that exist (the claim controller drops reservations of pods that do not) and stay Pending.
    uids = {}
    for name in ("first", "second"):
        body = dra_objects.pod_body(name, "unused", {})
        body["spec"]["schedulerName"] = "no-scheduler"
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        uids[name] = core.create_namespaced_pod(namespace, body).metadata.uid
    first = {"first": uids["first"]}

    def second_pod_refused() -> str | None:
        assert reserve(resource, namespace, "shared", first) == ""
        return reserve(resource, namespace, "shared", uids) or None

    refused = cluster.wait_for("the claim policy in force", second_pod_refused, timeout=60)
    assert f"ResourceClaim {namespace}/shared cannot be reserved for the pods first, second at once" in refused, refused
    assert "ResourceClaimTemplate" in refused, refused
    assert reserve(resource, namespace, "shared", {"second": uids["second"]}) == "", "the one consumer may change"
    assert reserve(resource, namespace, "shared", {}) == "", "a reservation may be released"
    assert reserve(resource, namespace, "other-driver", uids, driver="gpu.example.com") == "", (
        "another driver's claims are not this policy's"
    )
