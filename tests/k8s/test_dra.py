"""The DRA path through the real kube-scheduler, kube-controller-manager and kube-apiserver v1.36.3.

kube-scheduler runs with its default configuration (no extender: the DRA path needs none) and
allocates claims from the ResourceSlices our driver publishes. The nodes are simulated by kwok,
which runs no kubelet plugin, so the driver's slice publisher runs here for each of them, against
the real API server (which validates the slices), with fixed GPUs in place of NVML (no GPU here).
The driver's kubelet side is then exercised against the claims kube-scheduler allocated, through
FakeDraKubelet, a real gRPC peer speaking kubelet's wire format.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeDraKubelet
from kubernetes import client
from kubernetes.client.rest import ApiException
from vgpu_components import dra
from vgpu_components.dra_driver import DraDriver
from vgpu_components.quantity import parse_quantity

from tests.k8s import cluster, dra_objects

SCHEDULE_TIMEOUT = 60
GPUS_MIB = [cluster.GPU_12GIB, cluster.GPU_12GIB]


@pytest.fixture(scope="module")
def resource() -> Any:
    return client.ResourceV1Api(cluster.api_client())


@pytest.fixture(scope="module", autouse=True)
def plain_scheduler(resource: Any) -> Iterator[None]:
    """kube-scheduler as it comes (scheduler-plain.yaml: no extender), and the DeviceClass."""
    cluster.ctl("stop-scheduler")
    cluster.ctl("start-scheduler", str(cluster.STATE_DIR / "scheduler-plain.yaml"))
    try:
        resource.create_device_class(dra_objects.device_class_body())
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield
    resource.delete_device_class(dra_objects.DRIVER)
    cluster.ctl("stop-scheduler")
    cluster.ctl("start-scheduler")


@pytest.fixture
def dra_nodes(core: Any, gpu_nodes: cluster.NodeFactory) -> Iterator[Any]:
    """make(count) -> (selector, node names): Ready kwok nodes with our driver's ResourceSlice each.
    The slices are owned by their nodes: deleting a node deletes its slice."""
    folder = tempfile.TemporaryDirectory(prefix="vgpu-dra")
    api = dra_objects.dra_api()

    def make(count: int) -> tuple[dict[str, str], list[str]]:
        selector = gpu_nodes(count, GPUS_MIB)
        label = ",".join(f"{k}={v}" for k, v in selector.items())
        names = sorted(n.metadata.name for n in core.list_node(label_selector=label).items)
        for name in names:
            assert dra_objects.publish_slice(api, name, GPUS_MIB, Path(folder.name)) is True
            written = dra_objects.publish_slice(api, name, GPUS_MIB, Path(folder.name))
            assert written is False, "an unchanged slice was written again"
        return selector, names

    yield make
    folder.cleanup()


@contextmanager
def driver_on(node: str, tmp_path: Path) -> Iterator[tuple[dict[str, Any], FakeDraKubelet]]:
    """The DRA driver of `node` (its host paths under tmp_path) registered with kubelet's side of the
    gRPC API; yields its configuration and that kubelet, and stops both."""
    cfg = dra_objects.driver_config(tmp_path)
    kubelet = FakeDraKubelet(Path(cfg["dra"]["registry_dir"])).start()
    driver = DraDriver(cfg, dra_objects.node_gpus(node, GPUS_MIB), node, api=dra_objects.dra_api())
    driver.start()
    try:
        assert kubelet.registered.wait(5)
        yield cfg, kubelet
    finally:
        driver.stop()
        kubelet.stop()


def schedule(core: Any, namespace: str, name: str, template: str, selector: dict[str, str]) -> Any:
    core.create_namespaced_pod(namespace, dra_objects.pod_body(name, template, selector))
    return cluster.wait_bound(core, namespace, name, SCHEDULE_TIMEOUT)


def allocated(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(pool, device, consumed memory) of each result of an allocated claim."""
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["pool"], r["device"], r["consumedCapacity"]["memory"]) for r in results]


def memory_mib(quantity: str) -> int:
    return int(parse_quantity(quantity) / dra.MIB)


def test_the_published_slice_is_what_the_api_server_keeps(resource: Any, dra_nodes: Any, tmp_path: Path) -> None:
    """The API server accepts the slice with its consumable capacity (beta, on by default in 1.36)
    and keeps every field: nothing is dropped by a disabled feature gate."""
    _selector, [node] = dra_nodes(1)
    stored = json.loads(
        resource.read_resource_slice(dra.slice_name(node, dra_objects.DRIVER), _preload_content=False).data
    )
    device = stored["spec"]["devices"][0]
    assert device["allowMultipleAllocations"] is True
    assert memory_mib(device["capacity"]["memory"]["value"]) == 12200
    policy = device["capacity"]["memory"]["requestPolicy"]
    assert memory_mib(policy["validRange"]["step"]) == cluster.UNIT_MIB
    assert memory_mib(policy["default"]) == 12200
    assert stored["metadata"]["ownerReferences"][0]["kind"] == "Node"
    gpus = dra_objects.node_gpus(node, GPUS_MIB)
    wanted = dra.resource_slice(node, gpus, dra_objects.driver_config(tmp_path), generation=1)
    assert dra.same_devices(stored, wanted)


def test_reference_binpack_with_claims(
    core: Any, resource: Any, namespace: str, dra_nodes: Any, tmp_path: Path
) -> None:
    """Two 8000 MiB claims on 2 x 12 GiB GPUs land on two GPUs, two 2000 MiB claims share one;
    then the driver prepares them, as kubelet would ask it to, with the claims the scheduler wrote."""
    selector, [node] = dra_nodes(1)
    for mib in (8000, 2000):
        template = dra_objects.claim_template_body(f"gpu-{mib}", mib)
        resource.create_namespaced_resource_claim_template(namespace, template)
    names = ["big-0", "big-1", "small-0", "small-1"]
    for name in names:
        schedule(core, namespace, name, "gpu-8000" if name.startswith("big") else "gpu-2000", selector)
    claims = {name: dra_objects.pod_claim(core, resource, namespace, name) for name in names}
    placed = {name: allocated(claim) for name, claim in claims.items()}
    assert all(len(p) == 1 and p[0][0] == node for p in placed.values()), placed
    big = [placed[n][0][1] for n in ("big-0", "big-1")]
    small = [placed[n][0][1] for n in ("small-0", "small-1")]
    assert big[0] != big[1], f"two 8000 MiB claims share a 12 GiB GPU: {placed}"
    assert small[0] == small[1], f"the 2000 MiB claims were spread, not packed: {placed}"
    assert [memory_mib(placed[n][0][2]) for n in names] == [8000, 8000, 2000, 2000]

    # The driver's kubelet side: prepared through its gRPC service, from the claims as allocated.
    with driver_on(node, tmp_path) as (cfg, kubelet):
        refs = [(namespace, c["metadata"]["uid"], c["metadata"]["name"]) for c in claims.values()]
        response = kubelet.prepare(*refs)
        for name, (_ns, uid, _claim_name) in zip(names, refs, strict=True):
            result = response.claims[uid]
            assert result.error == "", result.error
            [device] = result.devices
            assert device.device_name == placed[name][0][1]
            alloc_id = device.cdi_device_ids[0].split("=", 1)[1]
            quota = Path(cfg["state_dir"]) / "quotas" / f"{alloc_id}.conf"
            mib = 8000 if name.startswith("big") else 2000
            assert f"memory_limit=0:{mib}MiB" in quota.read_text()
            spec = json.loads(dra.cdi_spec_file(cfg["dra"]["cdi_dir"], dra.cdi_kind(cfg), uid).read_text())
            pod_uid = core.read_namespaced_pod(name, namespace).metadata.uid
            # The name a pod can compute for containerd 1.6: <pod uid>.<its claim name>.<request>.
            assert [d["name"] for d in spec["devices"]] == [alloc_id, f"{pod_uid}.gpu.gpu"]
        gone = kubelet.unprepare(*refs)
        assert all(r.error == "" for r in gone.claims.values())
        assert not list((Path(cfg["state_dir"]) / "quotas").iterdir())


def test_one_claim_named_by_two_pods_is_not_prepared_and_kubelet_is_told_why(
    core: Any, resource: Any, namespace: str, dra_nodes: Any, tmp_path: Path
) -> None:
    """Issue 40 item 1: one ResourceClaim (not a template) named by two pods. kube-scheduler
    allocates it once and reserves it for both; the driver, asked to prepare it, refuses: one
    allocation is one container's quota, and each consumer would be held to all of it."""
    selector, [node] = dra_nodes(1)
    claim = dra_objects.claim_template_body("shared", 1000)["spec"]
    resource.create_namespaced_resource_claim(
        namespace,
        {"apiVersion": dra_objects.RESOURCE_API, "kind": "ResourceClaim", "metadata": {"name": "shared"}, **claim},
    )
    for name in ("first", "second"):
        body = dra_objects.pod_body(name, "unused", selector)
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        core.create_namespaced_pod(namespace, body)
        cluster.wait_bound(core, namespace, name, SCHEDULE_TIMEOUT)
    stored = dict(json.loads(resource.read_namespaced_resource_claim("shared", namespace, _preload_content=False).data))
    assert sorted(r["name"] for r in stored["status"]["reservedFor"]) == ["first", "second"]

    with driver_on(node, tmp_path) as (cfg, kubelet):
        uid = stored["metadata"]["uid"]
        error = kubelet.prepare((namespace, uid, "shared")).claims[uid].error
        users = f"{namespace}/first/main, {namespace}/second/main"
        expected = f"ResourceClaim {namespace}/shared is used by 2 containers ({users})"
        assert expected in error, error
        assert "ResourceClaimTemplate" in error
        assert not list((Path(cfg["state_dir"]) / "quotas").glob("*.conf"))


def test_a_claim_larger_than_any_gpu_stays_pending_with_the_schedulers_reason(
    core: Any, resource: Any, namespace: str, dra_nodes: Any
) -> None:
    selector, _names = dra_nodes(1)
    resource.create_namespaced_resource_claim_template(namespace, dra_objects.claim_template_body("huge", 13000))
    core.create_namespaced_pod(namespace, dra_objects.pod_body("huge", "huge", selector))
    # The first attempt may still meet the new kwok node's not-ready taint (a loaded CI machine):
    # kube-scheduler tries again when the taint goes, and then says the claim's reason.
    cluster.wait_for(
        "kube-scheduler's FailedScheduling reason for the 13000 MiB claim",
        lambda: any("cannot allocate all claims" in m for m in cluster.scheduling_events(core, namespace, "huge")),
        timeout=SCHEDULE_TIMEOUT,
        seen=lambda: cluster.scheduling_events(core, namespace, "huge"),
    )
    assert cluster.bound_node(core, namespace, "huge") is None


def test_concurrent_claims_never_overbook_a_gpu(core: Any, resource: Any, namespace: str, dra_nodes: Any) -> None:
    """Eight 5000 MiB claims at once on 2 nodes x 2 GPUs: two per GPU, never three (15000 > 12200)."""
    selector, _names = dra_nodes(2)
    resource.create_namespaced_resource_claim_template(namespace, dra_objects.claim_template_body("gpu-5000", 5000))
    names = [f"p-{i}" for i in range(8)]
    for name in names:
        core.create_namespaced_pod(namespace, dra_objects.pod_body(name, "gpu-5000", selector))
    for name in names:
        cluster.wait_bound(core, namespace, name, SCHEDULE_TIMEOUT)
    per_gpu: dict[tuple[str, str], int] = defaultdict(int)
    for name in names:
        for pool, device, memory in allocated(dra_objects.pod_claim(core, resource, namespace, name)):
            per_gpu[(pool, device)] += memory_mib(memory)
    assert sorted(per_gpu.values()) == [10000] * 4, f"GPU use in MiB: {dict(per_gpu)}"
