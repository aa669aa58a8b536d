"""The DRA path on a real node (`make e2e-node-dra`: tests/node/run-e2e.sh with
VGPU_E2E_SCHEDULING=dra): kubeadm, kubelet and the bundle's containerd (containerd-cdi/, whose CRI
applies CDI devices) as playbooks/site.yml provisions them with vgpu_scheduling: dra, and pods whose
ResourceClaims kube-scheduler allocates from the DRA driver's ResourceSlice and kubelet has the
driver prepare.

The node has no GPU: libvgpu's fake driver stands in for NVIDIA's (two 12 GiB GPUs; see
tests/node/fake_gpu.yml). tests/gpu/kubelet (VGPU_KUBELET_SCENARIO=dra) runs the same on the H200.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.node import node

DRIVER = node.DRIVER
HOLD = ["/opt/vgpu/vgpu-memory-usage", "1200", "86400"]

pytestmark = pytest.mark.skipif(
    node.SCHEDULING != "dra", reason="the DRA path's suite: VGPU_E2E_SCHEDULING=dra (make e2e-node-dra)"
)


def test_the_node_runs_a_containerd_that_applies_cdi_devices() -> None:
    """The kubeadm role installed the bundle's containerd-cdi/ over Debian's 1.6, and it runs."""
    out = node.exec_node("containerd", "--version")
    assert re.search(r"\bv?2\.\d+\.\d+", out), out
    assert node.exec_node("systemctl", "is-active", "containerd").strip() == "active"


def test_the_driver_publishes_each_gpu_with_its_memory() -> None:
    """The DRA driver's ResourceSlice of the node: two devices of (12288 - reserve) MiB rounded to units."""

    def node_slice() -> dict[str, Any] | None:
        for item in node.get("resourceslices")["items"]:
            if item["spec"].get("nodeName") == node.NODE and item["spec"].get("driver") == DRIVER:
                return dict(item)
        return None

    published = node.wait_for("the node's ResourceSlice", node_slice, timeout=180)
    devices = {d["name"]: d["capacity"]["memory"]["value"] for d in published["spec"]["devices"]}
    assert sorted(devices) == ["gpu-0", "gpu-1"]
    assert all(value.endswith("Mi") and 0 < int(value[:-2]) <= node.GPU_MIB for value in devices.values()), devices


def test_a_claim_of_3000_mib_runs_the_reference_app_under_its_quota(namespace: str) -> None:
    """The README's reference through a claim: vgpu-memory-usage 1200 runs, and libvgpu in the pod
    reports the claim's 3000 MiB as its quota."""
    node.apply(namespace, *node.claim_pod("claimed", 3000, HOLD))
    node.wait_for("claimed Running", lambda: node.running(node.get("pod", "claimed", namespace)), timeout=240)

    def holding() -> dict[str, int] | None:
        report = json.loads(
            node.kubectl("exec", "-n", namespace, "claimed", "--", "/opt/vgpu/manage", "--stats", "--json")
        )
        device = report["devices"][0]
        found = {"quota_mib": device["limit_bytes"] >> 20, "used_mib": device["used_bytes"] >> 20}
        return found if found["used_mib"] >= 1200 else None

    report = node.wait_for("claimed holding 1200 MiB", holding, timeout=60)
    assert report == {"quota_mib": 3000, "used_mib": 1200}
    claim = node.get("pod", "claimed", namespace)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    result = node.get("resourceclaim", claim, namespace)["status"]["allocation"]["devices"]["results"][0]
    assert result["driver"] == DRIVER and result["consumedCapacity"]["memory"] == "3000Mi"


def test_the_same_app_fails_under_a_1000_mib_claim(namespace: str) -> None:
    node.apply(namespace, *node.claim_pod("too-small", 1000, HOLD))

    def finished() -> str | None:
        phase = node.get("pod", "too-small", namespace)["status"].get("phase")
        return str(phase) if phase in ("Failed", "Succeeded") else None

    assert node.wait_for("too-small to finish", finished, timeout=180) == "Failed"
    assert "CUDA_ERROR_OUT_OF_MEMORY" in node.kubectl("logs", "-n", namespace, "too-small")


def test_a_claim_larger_than_any_gpu_stays_pending_with_the_schedulers_reason(namespace: str) -> None:
    node.apply(namespace, *node.claim_pod("too-big", node.GPU_MIB + 1000, ["/bin/true"]))

    def reason() -> str | None:
        conditions = node.get("pod", "too-big", namespace)["status"].get("conditions") or []
        message = next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")
        return message if "cannot allocate all claims" in message else None

    node.wait_for("too-big's PodScheduled reason", reason, timeout=120)
    assert node.get("pod", "too-big", namespace)["status"]["phase"] == "Pending"
