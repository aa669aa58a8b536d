"""The DRA driver: its pure core (dra.py) and the driver against a real gRPC kubelet peer.

FakeDraKubelet speaks kubelet's plugin registration and DRAPlugin v1 wire formats over unix
sockets; the API server is FakeDraApi here (tests/k8s/test_dra.py runs the real kube-apiserver
and kube-scheduler). NVML is replaced by fixed GPUs: there is no GPU on the CI machine.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import (
    GIB,
    FakeDraApi,
    FakeDraKubelet,
    FakeGpus,
    allocated_claim,
    fake_mps_control,
    make_config,
    mps_ask,
    two_gpus,
)
from vgpu_components import config, dra, mps_contract, mps_requests, region
from vgpu_components.allocator import DeviceTable
from vgpu_components.container import build_allocation, container_contract
from vgpu_components.dra import PrepareError
from vgpu_components.dra_driver import DraDriver
from vgpu_components.mps_supervisor import MpsManager
from vgpu_components.nvml import Gpu

from tests.polling import wait_for

NODE = "node-a"
GPUS = two_gpus()
UUID0, UUID1 = GPUS[0].uuid, GPUS[1].uuid
CLAIM_UID = "6f2c1d3e-0000-4000-8000-000000000001"
POD_UID = "0b7e5a4c-0000-4000-8000-0000000000aa"


def cfg_for(root: Path, **changes: Any) -> dict[str, Any]:
    cfg = make_config(root)
    cfg.update(changes)
    cfg["dra"]["plugins_dir"] = str(root / "plugins")
    cfg["dra"]["registry_dir"] = str(root / "registry")
    cfg["dra"]["cdi_dir"] = str(root / "cdi")
    cfg["dra"]["nvidia_cdi_dirs"] = f"{root / 'etc-cdi'},{root / 'cdi'}"
    return cfg


# --- the ResourceSlice -------------------------------------------------------------------------
def test_slice_offers_each_gpu_memory_as_consumable_capacity_in_units(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, reserved_mib=250)
    body = dra.resource_slice(NODE, GPUS, cfg, generation=3, node_uid="u-1")
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert body["metadata"]["name"] == "node-a-gpu.vgpu.io"
    assert body["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "u-1", "controller": True,
    }  # fmt: skip
    spec = body["spec"]
    assert (spec["driver"], spec["nodeName"], spec["pool"]) == (
        "gpu.vgpu.io", NODE, {"name": NODE, "generation": 3, "resourceSliceCount": 1},
    )  # fmt: skip
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    device = spec["devices"][0]
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"] == {
        "uuid": {"string": UUID0}, "index": {"int": 0}, "productName": {"string": "Fake 12G"},
    }  # fmt: skip
    # (12288 - 250) MiB rounded down to 100 MiB units: what the device plugin would advertise.
    assert device["capacity"] == {
        "memory": {
            "value": "12000Mi",
            "requestPolicy": {"default": "12000Mi", "validRange": {"min": "100Mi", "step": "100Mi"}},
        }
    }


def test_slice_follows_the_prefix_and_unit_and_skips_a_gpu_reserved_away(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path, resource_prefix="gpus.example.com", unit_mib=256, reserved_mib=0)
    small = Gpu(uuid="GPU-small", index=2, total_mib=200)
    spec = dra.resource_slice(NODE, [*GPUS, small], cfg, generation=1)["spec"]
    assert spec["driver"] == "gpu.gpus.example.com"
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1"]
    assert spec["devices"][1]["capacity"]["memory"]["value"] == f"{48 * 256}Mi"
    assert spec["devices"][1]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "256Mi"
    assert dra.cdi_kind(cfg) == "gpus.example.com/claim"


def test_a_long_node_name_still_makes_a_valid_slice_name() -> None:
    node = "n" * 250
    name = dra.slice_name(node, "gpu.vgpu.io")
    assert len(name) <= 253 and name.startswith("n" * 200 + "-")
    assert name == dra.slice_name(node, "gpu.vgpu.io")


def test_a_published_slice_with_normalised_quantities_is_the_same(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path)
    wanted = dra.resource_slice(NODE, GPUS, cfg, generation=1)
    published = json.loads(json.dumps(wanted).replace('"12200Mi"', f'"{12200 * 2**20}"'))
    assert dra.same_devices(published, wanted)
    assert not dra.same_devices(dra.resource_slice(NODE, GPUS[:1], cfg, generation=1), wanted)


# --- claims ------------------------------------------------------------------------------------
def test_claim_devices_take_the_consumed_memory_of_this_pool(tmp_path: Path) -> None:
    cfg = cfg_for(tmp_path)
    claim = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-1", "8000Mi")])
    claim["status"]["allocation"]["devices"]["results"].append(
        {"request": "other", "driver": "gpu.nvidia.com", "pool": NODE, "device": "gpu-0"}
    )
    [device] = dra.claim_devices(claim, NODE, GPUS, cfg)
    assert (device.request, device.device, device.gpu.uuid, device.units) == ("gpu", "gpu-1", UUID1, 80)
    share = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    assert device.share_id == share
    assert device.alloc_id == dra.dra_alloc_id(CLAIM_UID, "gpu", "gpu-1", share)
    assert len(device.alloc_id) == 16 and int(device.alloc_id, 16) >= 0


def test_a_device_allocated_whole_gets_the_whole_gpu(tmp_path: Path) -> None:
    """Without the API server's DRAConsumableCapacity gate there is no consumed capacity."""
    cfg = cfg_for(tmp_path)
    [device] = dra.claim_devices(allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-0", None)]), NODE, GPUS, cfg)
    assert device.units == 122 and device.share_id == ""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda c: c["status"].pop("allocation"), "is not allocated"),
        (lambda c: c["status"]["allocation"]["devices"]["results"][0].update(pool="node-b"), "has no device of driver"),
        (lambda c: c["status"]["allocation"]["devices"]["results"][0].update(device="gpu-7"), "'gpu-7' is not one of"),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].update(consumedCapacity={"memory": "150Mi"}),
            "not a whole number of 100 MiB units",
        ),
        (
            lambda c: c["status"]["allocation"]["devices"]["results"][0].update(consumedCapacity={"memory": "x"}),
            "is not a Kubernetes quantity",
        ),
    ],
)
def test_a_claim_that_cannot_be_prepared_here_says_why(tmp_path: Path, change: Any, message: str) -> None:
    claim = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-0", "2000Mi")])
    change(claim)
    with pytest.raises(PrepareError, match=message):
        dra.claim_devices(claim, NODE, GPUS, cfg_for(tmp_path))


def test_pods_name_their_claims_directly_or_through_a_template() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "t"},
                {"name": "x", "resourceClaimName": "c"},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-8k2x1"}]},
    }
    assert dra.pod_claim_names(pod, "p-gpu-8k2x1") == ["gpu"]
    assert dra.pod_claim_names(pod, "c") == ["x"]
    assert dra.pod_claim_names(pod, "other") == []
    assert dra.pod_alias(POD_UID, "gpu", "mem/small") == f"{POD_UID}.gpu.mem"


# --- CDI ---------------------------------------------------------------------------------------
def test_the_cdi_device_is_exactly_the_device_plugin_contract(tmp_path: Path) -> None:
    """One contract: what Allocate returns for 30 units is what the CDI device carries for 3000 MiB."""
    cfg = cfg_for(tmp_path)
    table = DeviceTable(GPUS, 100)
    ids = [f"{table.gpus()[0].key}-{n}" for n in range(30)]
    plugin = build_allocation(table, ids, cfg)
    ours = container_contract(GPUS[0], 30, 100, plugin.alloc_id, cfg)
    assert (ours.envs, ours.mounts, ours.quota_text) == (plugin.envs, plugin.mounts, plugin.quota_text)
    spec = dra.cdi_spec("vgpu.io/claim", [(["a1", "alias"], ours)], {})
    assert spec["kind"] == "vgpu.io/claim" and [d["name"] for d in spec["devices"]] == ["a1", "alias"]
    edits = spec["devices"][0]["containerEdits"]
    assert sorted(edits["env"]) == sorted(f"{k}={v}" for k, v in plugin.envs.items())
    assert {(m["containerPath"], m["hostPath"], m["options"][0]) for m in edits["mounts"]} == {
        (c, h, "ro" if ro else "rw") for c, h, ro in plugin.mounts
    }
    assert "VGPU_MEMORY_LIMIT=3000MiB" in edits["env"] and f"NVIDIA_VISIBLE_DEVICES={UUID0}" in edits["env"]


def test_a_claim_on_an_mps_node_gets_the_mps_contract_as_the_device_plugin_gives_it(tmp_path: Path) -> None:
    """MPS on the node (its <prefix>/mps label, or the config): the claim's container gets the pipe
    of its own MPS daemon, whose request carries the configured thread percentage and, on a CUDA
    11.5+ driver, the driver's own limit at its quota, exactly as a device-plugin container of the
    same size does; none of it is in the container's environment."""
    cfg = cfg_for(tmp_path)
    cfg["device_plugin"]["mps_enabled"] = True
    cfg["device_plugin"]["mps_active_thread_percentage"] = 40
    backend = FakeGpus(GPUS)
    driver = DraDriver(cfg, GPUS, NODE, api=FakeDraApi(), backend=backend)
    device = dra.ClaimDevice("gpu", NODE, "gpu-0", "", GPUS[0], 30, "0123456789abcdef")
    claim = driver._allocation(device)
    assert {k: v for k, v in claim.envs.items() if k.startswith("CUDA_MPS")} == {
        "CUDA_MPS_PIPE_DIRECTORY": cfg["mps"]["pipe_dir"]
    }
    assert (cfg["mps"]["pipe_dir"], f"{cfg['mps']['pipe_dir']}/0123456789abcdef", True) in claim.mounts
    assert claim.mps_request is not None
    assert claim.mps_request.settings() == (GPUS[0].uuid, 40, 3000)
    table = DeviceTable(GPUS, 100)
    ids = [f"{table.gpus()[0].key}-{n}" for n in range(30)]
    plugin = build_allocation(table, ids, cfg, mps_contract.for_node(cfg, backend, logging.getLogger("test")))
    assert {k: v for k, v in plugin.envs.items() if k.startswith("CUDA_MPS")} == {
        k: v for k, v in claim.envs.items() if k.startswith("CUDA_MPS")
    }
    assert plugin.mps_request is not None and plugin.mps_request.settings() == claim.mps_request.settings()
    cfg["device_plugin"]["mps_enabled"] = False
    off = DraDriver(cfg, GPUS, NODE, api=FakeDraApi(), backend=backend)._allocation(device)
    assert not any(k.startswith("CUDA_MPS") for k in off.envs) and off.mps_request is None


def test_nvidia_edits_of_the_gpu_come_first_so_the_contract_wins(tmp_path: Path) -> None:
    etc = tmp_path / "etc-cdi"
    etc.mkdir()
    (etc / "nvidia.yaml").write_text(
        "cdiVersion: 0.7.0\nkind: nvidia.com/gpu\n"
        "containerEdits:\n  env: [NVIDIA_VISIBLE_DEVICES=void]\n  deviceNodes: [{path: /dev/nvidiactl}]\n"
        f"devices:\n  - name: '{UUID0}'\n    containerEdits:\n      deviceNodes: [{{path: /dev/nvidia0}}]\n"
        "  - name: '1'\n    containerEdits:\n      deviceNodes: [{path: /dev/nvidia1}]\n"
    )
    (etc / "other.json").write_text(json.dumps({"cdiVersion": "0.6.0", "kind": "example.com/x", "devices": []}))
    (etc / "broken.yaml").write_text("{ not yaml")
    edits = dra.nvidia_gpu_edits([etc, tmp_path / "missing"])
    assert set(edits) == {UUID0, "1"}
    cfg = cfg_for(tmp_path)
    first = container_contract(GPUS[0], 20, 100, "a" * 16, cfg)
    second = container_contract(GPUS[1], 20, 100, "b" * 16, cfg)
    spec = dra.cdi_spec("vgpu.io/claim", [(["x"], first), (["y"], second)], edits)
    assert spec["cdiVersion"] == "0.7.0"
    x, y = (d["containerEdits"] for d in spec["devices"])
    assert x["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia0"}]
    assert y["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia1"}]  # found by index
    assert x["env"].index("NVIDIA_VISIBLE_DEVICES=void") < x["env"].index(f"NVIDIA_VISIBLE_DEVICES={UUID0}")


# --- the driver against a real gRPC kubelet peer -------------------------------------------------
class DraNode:
    def __init__(self, root: Path, api: FakeDraApi | None = None) -> None:
        self.root = root
        self.cfg = cfg_for(root)
        self.api = api or FakeDraApi()
        self.kubelet = FakeDraKubelet(root / "registry").start()
        self.driver = DraDriver(self.cfg, GPUS, NODE, api=self.api)
        self.driver.start()
        assert self.kubelet.registered.wait(5), "the driver never registered with kubelet"

    def stop(self) -> None:
        self.driver.stop()
        self.kubelet.stop()


@pytest.fixture
def node(short_tmp: Path) -> Iterator[DraNode]:
    n = DraNode(short_tmp)
    yield n
    n.stop()


def pod_with_claim(name: str, uid: str, claim: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": uid},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-3000"}]},
        "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim}]},
    }


def test_registers_through_the_plugin_watcher_with_the_v1_service(node: DraNode) -> None:
    [info] = node.kubelet.infos
    assert (info.type, info.name, list(info.supported_versions)) == ("DRAPlugin", "gpu.vgpu.io", ["v1.DRAPlugin"])
    assert info.endpoint == str(node.root / "plugins" / "gpu.vgpu.io" / "dra.sock")
    assert Path(info.endpoint).is_socket()
    assert (node.root / "registry" / "gpu.vgpu.io-reg.sock").is_socket()
    wait_for("the driver to be healthy", lambda: node.driver.healthy()[0], 5, 0.05, seen=node.driver.healthy)
    assert node.driver.healthy() == (True, "ok, registered; 2 GPU(s) published")


def test_prepare_writes_the_contract_as_a_cdi_device_and_unprepare_removes_it(node: DraNode) -> None:
    claim = allocated_claim("p-gpu-1", CLAIM_UID, NODE, [("gpu", "gpu-1", "3000Mi")], reserved_for=[("p", POD_UID)])
    node.api.claims[("ns", "p-gpu-1")] = claim
    node.api.pods[("ns", "p")] = pod_with_claim("p", POD_UID, "p-gpu-1")
    response = node.kubelet.prepare(("ns", CLAIM_UID, "p-gpu-1"))

    result = response.claims[CLAIM_UID]
    assert result.error == ""
    [device] = result.devices
    share = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    alloc_id = dra.dra_alloc_id(CLAIM_UID, "gpu", "gpu-1", share)
    assert (list(device.request_names), device.pool_name, device.device_name, device.share_id) == (
        ["gpu"], NODE, "gpu-1", share,
    )  # fmt: skip
    assert list(device.cdi_device_ids) == [f"vgpu.io/claim={alloc_id}"]

    state = Path(node.cfg["state_dir"])
    region = state / "containers" / alloc_id
    quota = state / "quotas" / f"{alloc_id}.conf"
    assert stat.S_IMODE(os.stat(region / "vgpu.region").st_mode) == 0o666
    assert "memory_limit=0:3000MiB" in quota.read_text()
    spec_file = node.root / "cdi" / f"vgpu.io-claim_{CLAIM_UID}.json"
    spec = json.loads(spec_file.read_text())
    assert [d["name"] for d in spec["devices"]] == [alloc_id, f"{POD_UID}.gpu.gpu"]
    expected = container_contract(GPUS[1], 30, 100, alloc_id, node.cfg)
    assert spec["devices"][0]["containerEdits"] == dra.contract_edits(expected)
    assert spec["devices"][1]["containerEdits"] == spec["devices"][0]["containerEdits"]

    # kubelet may ask again (its own restart): the same answer, the same folders, no API read.
    reads = len(node.api.calls)
    (region / "vgpu.region").write_bytes(b"in use")
    again = node.kubelet.prepare(("ns", CLAIM_UID, "p-gpu-1")).claims[CLAIM_UID]
    assert list(again.devices[0].cdi_device_ids) == [f"vgpu.io/claim={alloc_id}"]
    assert (region / "vgpu.region").read_bytes() == b"in use"
    assert [c for c in node.api.calls[reads:] if c[0] in ("get_claim", "get_pod")] == []

    gone = node.kubelet.unprepare(("ns", CLAIM_UID, "p-gpu-1"))
    assert gone.claims[CLAIM_UID].error == ""
    assert not region.exists() and not quota.exists() and not spec_file.exists()
    assert not (state / "dra" / f"{CLAIM_UID}.json").exists()
    # A claim never prepared here, or unprepared already, unprepares fine.
    assert node.kubelet.unprepare(("ns", CLAIM_UID, "p-gpu-1")).claims[CLAIM_UID].error == ""


def test_a_prepared_claims_region_file_grown_by_its_container_is_cut_back(short_tmp: Path) -> None:
    """Issue 40 item 3 on the DRA path: the driver owns the claims' host paths, so its poll (every
    device_plugin.pod_resources_poll_s) cuts a region file its container grew back to its size."""
    cfg = cfg_for(short_tmp)
    cfg["device_plugin"]["pod_resources_poll_s"] = 0.05
    api = FakeDraApi()
    kubelet = FakeDraKubelet(short_tmp / "registry").start()
    driver = DraDriver(cfg, GPUS, NODE, api=api)
    driver.start()
    try:
        assert kubelet.registered.wait(5)
        api.claims[("ns", "p-gpu-1")] = allocated_claim(
            "p-gpu-1", CLAIM_UID, NODE, [("gpu", "gpu-1", "3000Mi")], reserved_for=[("p", POD_UID)]
        )
        api.pods[("ns", "p")] = pod_with_claim("p", POD_UID, "p-gpu-1")
        [device] = kubelet.prepare(("ns", CLAIM_UID, "p-gpu-1")).claims[CLAIM_UID].devices
        alloc_id = next(iter(device.cdi_device_ids)).split("=", 1)[1]
        region_file = Path(cfg["state_dir"]) / "containers" / alloc_id / "vgpu.region"
        assert region_file.stat().st_size == region.FILE_SIZE
        with open(region_file, "r+b") as tenant:
            tenant.seek(32 * 1024 * 1024)
            tenant.write(b"x")
        wait_for("the region cut back", lambda: region_file.stat().st_size == region.FILE_SIZE, 10, 0.02)
        assert driver.claims.host_paths.regions_cut >= 1
    finally:
        driver.stop()
        kubelet.stop()


OTHER_POD_UID = "0f0e0d0c-0b0a-4909-8807-060504030201"


def test_a_claim_shared_by_two_pods_is_refused_with_why_and_leaves_nothing(node: DraNode) -> None:
    """Issue 40 item 1: one ResourceClaim referenced by several pods gave each of them the claim's
    whole quota (8 x 1400 MiB on one 1000 MiB claim). One allocation is one container's quota: a
    claim reserved for more than one consumer is not prepared, and kubelet shows why."""
    claim = allocated_claim(
        "shared", CLAIM_UID, NODE, [("gpu", "gpu-1", "1000Mi")], reserved_for=[("p", POD_UID), ("q", OTHER_POD_UID)]
    )
    node.api.claims[("ns", "shared")] = claim
    for name, uid in (("p", POD_UID), ("q", OTHER_POD_UID)):
        pod = pod_with_claim(name, uid, "shared")
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        node.api.pods[("ns", name)] = pod
    result = node.kubelet.prepare(("ns", CLAIM_UID, "shared")).claims[CLAIM_UID]
    assert "ResourceClaim ns/shared is used by 2 containers (ns/p, ns/q)" in result.error, result.error
    assert "one container's GPU-memory quota" in result.error and "ResourceClaimTemplate" in result.error
    state = Path(node.cfg["state_dir"])
    assert list((state / "containers").glob("*")) == []
    assert not (node.root / "cdi" / f"vgpu.io-claim_{CLAIM_UID}.json").exists()
    assert not (state / "dra" / f"{CLAIM_UID}.json").exists()

    # The other pod finished (or was deleted): the claim is one container's again and is prepared.
    node.api.pods[("ns", "q")]["status"]["phase"] = "Succeeded"
    assert node.kubelet.prepare(("ns", CLAIM_UID, "shared")).claims[CLAIM_UID].error == ""


def test_a_claim_used_by_two_containers_of_one_pod_is_refused(node: DraNode) -> None:
    claim = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-1", "1000Mi")], reserved_for=[("p", POD_UID)])
    node.api.claims[("ns", "c")] = claim
    pod = pod_with_claim("p", POD_UID, "c")
    pod["spec"]["containers"] = [
        {"name": "a", "resources": {"claims": [{"name": "gpu"}]}},
        {"name": "b", "resources": {"claims": [{"name": "gpu"}]}},
        {"name": "sidecar"},
    ]
    node.api.pods[("ns", "p")] = pod
    error = node.kubelet.prepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error
    assert "ResourceClaim ns/c is used by 2 containers (ns/p/a, ns/p/b)" in error, error


def test_a_claim_on_an_mps_node_starts_with_its_own_mps_daemon_and_ends_with_it(short_tmp: Path) -> None:
    """On an MPS node prepare returns only once nvidia-mps runs the allocation's daemon with the
    claim's quota as its pinned limit; unprepare makes nvidia-mps stop it."""
    manager_cfg = cfg_for(short_tmp)
    manager_cfg["device_plugin"]["mps_enabled"] = True
    manager_cfg["mps"].update(
        pipe_dir=str(short_tmp / "mps"), log_dir=str(short_tmp / "mps" / "log"), probe_interval_s=0.2,
        control_binary=fake_mps_control(short_tmp),
    )  # fmt: skip
    manager = MpsManager(manager_cfg)
    manager.start()
    threading.Thread(target=manager.run, daemon=True).start()
    api = FakeDraApi()
    kubelet = FakeDraKubelet(short_tmp / "registry").start()
    driver = DraDriver(manager_cfg, GPUS, NODE, api=api, backend=FakeGpus(GPUS))
    driver.start()
    try:
        assert kubelet.registered.wait(5)
        claim = allocated_claim("p-gpu-1", CLAIM_UID, NODE, [("gpu", "gpu-1", "3000Mi")], reserved_for=[("p", POD_UID)])
        api.claims[("ns", "p-gpu-1")] = claim
        api.pods[("ns", "p")] = pod_with_claim("p", POD_UID, "p-gpu-1")
        assert kubelet.prepare(("ns", CLAIM_UID, "p-gpu-1")).claims[CLAIM_UID].error == ""
        share = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
        pipe = mps_requests.pipe_folder(
            manager_cfg["mps"]["pipe_dir"], dra.dra_alloc_id(CLAIM_UID, "gpu", "gpu-1", share)
        )
        assert mps_ask(pipe, "exact_default_device_pinned_mem_limit 0") == "3000M"
        assert mps_ask(pipe, "get_default_active_thread_percentage") == "100.0"
        assert kubelet.unprepare(("ns", CLAIM_UID, "p-gpu-1")).claims[CLAIM_UID].error == ""
        wait_for("its daemon stopped", lambda: not pipe.exists(), timeout=20, interval=0.05)
    finally:
        driver.stop()
        kubelet.stop()
        manager.stop()


def test_a_claim_whose_mps_daemon_does_not_start_is_not_prepared(short_tmp: Path) -> None:
    cfg = cfg_for(short_tmp)
    cfg["device_plugin"]["mps_enabled"] = True
    cfg["mps"].update(pipe_dir=str(short_tmp / "mps"), start_timeout_s=0.3)
    api = FakeDraApi()
    driver = DraDriver(cfg, GPUS, NODE, api=api, backend=FakeGpus(GPUS))
    api.claims[("ns", "p-gpu-1")] = allocated_claim("p-gpu-1", CLAIM_UID, NODE, [("gpu", "gpu-1", "3000Mi")])
    with pytest.raises(PrepareError, match="is nvidia-mps running on this node"):
        driver.prepare("ns", CLAIM_UID, "p-gpu-1")
    assert not list((short_tmp / "state" / "quotas").glob("*.conf"))  # nothing left behind
    assert not list(mps_requests.requests_dir(cfg["state_dir"]).glob("*.json"))


def test_each_claim_gets_its_own_answer(node: DraNode) -> None:
    good_uid = "6f2c1d3e-0000-4000-8000-000000000002"
    node.api.claims[("ns", "good")] = allocated_claim("good", good_uid, NODE, [("gpu", "gpu-0", "2000Mi")])
    node.api.claims[("ns", "elsewhere")] = allocated_claim(
        "elsewhere", CLAIM_UID, "node-b", [("gpu", "gpu-0", "2000Mi")]
    )
    response = node.kubelet.prepare(
        ("ns", good_uid, "good"), ("ns", CLAIM_UID, "elsewhere"), ("ns", "no-such-uid", "missing")
    )
    assert response.claims[good_uid].error == "" and len(response.claims[good_uid].devices) == 1
    assert "has no device of driver gpu.vgpu.io on node node-a" in response.claims[CLAIM_UID].error
    assert "Not Found" in response.claims["no-such-uid"].error
    assert not (node.root / "cdi" / f"vgpu.io-claim_{CLAIM_UID}.json").exists()


def test_a_claim_made_again_under_the_same_name_is_refused(node: DraNode) -> None:
    node.api.claims[("ns", "c")] = allocated_claim("c", "new-uid", NODE, [("gpu", "gpu-0", "2000Mi")])
    error = node.kubelet.prepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error
    assert "has UID new-uid, kubelet asked for" in error


def test_two_results_of_one_claim_are_two_devices(node: DraNode) -> None:
    claim = allocated_claim("c", CLAIM_UID, NODE, [("a", "gpu-0", "1000Mi"), ("b", "gpu-0", "4000Mi")])
    node.api.claims[("ns", "c")] = claim
    result = node.kubelet.prepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID]
    assert [(list(d.request_names), d.device_name) for d in result.devices] == [(["a"], "gpu-0"), (["b"], "gpu-0")]
    quotas = Path(node.cfg["state_dir"]) / "quotas"
    limits = sorted(
        (quotas / f"{d.cdi_device_ids[0].split('=')[1]}.conf").read_text().splitlines()[1] for d in result.devices
    )
    assert limits == ["memory_limit=0:1000MiB", "memory_limit=0:4000MiB"]


def test_a_restarted_driver_writes_the_cdi_specifications_again(short_tmp: Path) -> None:
    api = FakeDraApi()
    api.claims[("ns", "c")] = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-0", "2000Mi")])
    first = DraNode(short_tmp, api)
    first.kubelet.prepare(("ns", CLAIM_UID, "c"))
    first.stop()
    spec_file = short_tmp / "cdi" / f"vgpu.io-claim_{CLAIM_UID}.json"
    before = spec_file.read_text()
    spec_file.unlink()  # /var/run/cdi is a tmpfs: a reboot empties it
    second = DraNode(short_tmp, api)
    try:
        assert spec_file.read_text() == before
        assert second.kubelet.unprepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error == ""
        assert not spec_file.exists()
    finally:
        second.stop()


def test_a_removed_socket_is_served_again_and_kubelet_registers_anew(node: DraNode) -> None:
    (node.root / "registry" / "gpu.vgpu.io-reg.sock").unlink()
    wait_for(
        "kubelet to see the registration socket again",
        lambda: len(node.kubelet.infos) == 2,
        5,
        0.05,
        seen=lambda: f"{len(node.kubelet.infos)} registration(s)",
    )
    node.api.claims[("ns", "c")] = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-0", "2000Mi")])
    assert node.kubelet.prepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error == ""


def test_serving_again_keeps_the_new_sockets_when_the_old_server_stops_late(node: DraNode) -> None:
    """The previous server unlinks its socket paths when its shutdown ends; when that ends after the
    new server bound the same paths, kubelet finds no socket (seen in CI under load)."""
    for attempt in range(10):
        node.driver._serve()  # what the socket watch does on a removed socket
        time.sleep(0.2)  # the old server's shutdown has ended by now
        gone = [p.name for p in (node.driver.socket_path, node.driver.registration_path) if not p.exists()]
        assert not gone, f"serving again #{attempt + 1}: the old server's shutdown removed {gone}"


# --- the ResourceSlice publisher ----------------------------------------------------------------
def test_the_slice_is_created_once_then_changed_only_with_a_new_generation(short_tmp: Path) -> None:
    api = FakeDraApi()
    cfg = cfg_for(short_tmp)
    driver = DraDriver(cfg, GPUS, NODE, api=api)
    assert driver.publish_slice() is True
    [body] = list(api.slices.values())
    assert body["spec"]["pool"]["generation"] == 1
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-of-node-a"
    assert driver.publish_slice() is False  # unchanged: no write
    assert [c for c in api.calls if c[0] != "list_slices"] == [("create_slice", "node-a-gpu.vgpu.io")]

    # Another unit (the ConfigMap changed and the driver restarted): replaced, generation 2.
    cfg["unit_mib"] = 200
    assert DraDriver(cfg, GPUS, NODE, api=api).publish_slice() is True
    [body] = list(api.slices.values())
    assert body["spec"]["pool"]["generation"] == 2
    assert body["spec"]["devices"][0]["capacity"]["memory"]["value"] == "12200Mi"
    assert body["spec"]["devices"][0]["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == "200Mi"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-of-node-a"


def test_a_stale_slice_of_this_node_is_deleted(short_tmp: Path) -> None:
    api = FakeDraApi()
    stale = dra.resource_slice(NODE, GPUS, cfg_for(short_tmp), generation=4)
    stale["metadata"]["name"] = "node-a-gpu.vgpu.io-old"
    api.create_slice(stale)
    DraDriver(cfg_for(short_tmp), GPUS, NODE, api=api).publish_slice()
    assert list(api.slices) == ["node-a-gpu.vgpu.io"]
    assert api.slices["node-a-gpu.vgpu.io"]["spec"]["pool"]["generation"] == 5


def test_the_dra_section_is_validated(tmp_path: Path) -> None:
    with pytest.raises(config.ConfigError, match=r"dra\.resync_s: 0\.0 must be more than 0"):
        config.load(None, environ={"VGPU_DRA_RESYNC_S": "0"})
    with pytest.raises(config.ConfigError, match=r"dra\.healthz_port: 70000 must be from 0 to 65535"):
        config.load(None, environ={"VGPU_DRA_HEALTHZ_PORT": "70000"})
    assert config.load(None, environ={})["dra"]["cdi_dir"] == "/var/run/cdi"


def test_units_are_the_device_plugins(tmp_path: Path) -> None:
    gpu = Gpu(uuid="GPU-x", index=0, total_mib=16 * GIB)
    assert dra.usable_units(gpu, cfg_for(tmp_path, reserved_mib=384)) == (16 * GIB - 384) // 100


def _prepared(node: DraNode) -> tuple[Path, str]:
    """One claim prepared on the node: its record file and its allocation ID."""
    node.api.claims[("ns", "c")] = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-0", "2000Mi")])
    [device] = node.kubelet.prepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].devices
    alloc_id = device.cdi_device_ids[0].split("=", 1)[1]
    return Path(node.cfg["state_dir"]) / "dra" / f"{CLAIM_UID}.json", alloc_id


def test_a_record_changed_on_disk_is_refused_and_nothing_is_removed(node: DraNode) -> None:
    """A record whose content no longer matches its checksum names the file; unprepare must not act
    on it (here it would retire another allocation's folders)."""
    record, alloc_id = _prepared(node)
    other = Path(node.cfg["state_dir"]) / "containers" / "someone-else"
    other.mkdir()
    record.write_text(record.read_text().replace(alloc_id, "someone-else"))
    error = node.kubelet.unprepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error
    assert str(record) in error and "checksum" in error
    assert other.is_dir() and (Path(node.cfg["state_dir"]) / "containers" / alloc_id).is_dir()


def test_a_record_cut_short_is_named_with_what_to_do(node: DraNode) -> None:
    record, _alloc_id = _prepared(node)
    record.write_bytes(record.read_bytes()[:20])
    error = node.kubelet.prepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error
    assert str(record) in error and "not a complete checkpoint" in error


def test_a_record_of_an_unknown_version_is_refused(node: DraNode) -> None:
    record, _alloc_id = _prepared(node)
    doc = json.loads(record.read_text())
    doc["version"] = 99
    record.write_text(json.dumps(doc))
    error = node.kubelet.unprepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error
    assert "version 99" in error and "expected 1" in error


def test_a_record_of_the_previous_release_still_unprepares(node: DraNode) -> None:
    """Records written before checkpoints were versioned are plain JSON: an upgraded driver must
    still unprepare the claims they describe."""
    record, alloc_id = _prepared(node)
    record.write_text(json.dumps(json.loads(record.read_text())["data"]))
    assert node.kubelet.unprepare(("ns", CLAIM_UID, "c")).claims[CLAIM_UID].error == ""
    assert not (Path(node.cfg["state_dir"]) / "containers" / alloc_id).exists()


def test_a_restarted_driver_names_a_corrupt_record_and_restores_the_rest(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api = FakeDraApi()
    api.claims[("ns", "c")] = allocated_claim("c", CLAIM_UID, NODE, [("gpu", "gpu-0", "2000Mi")])
    first = DraNode(short_tmp, api)
    first.kubelet.prepare(("ns", CLAIM_UID, "c"))
    first.stop()
    broken = short_tmp / "state" / "dra" / "0000-broken.json"
    broken.write_text("{")
    (short_tmp / "cdi" / f"vgpu.io-claim_{CLAIM_UID}.json").unlink()
    caplog.set_level(logging.ERROR, logger="vgpu.dra_driver")
    second = DraNode(short_tmp, api)
    try:
        assert (short_tmp / "cdi" / f"vgpu.io-claim_{CLAIM_UID}.json").exists()
        assert any(str(broken) in r.getMessage() for r in caplog.records)
    finally:
        second.stop()
