"""Issue 40 item 1: a shared ResourceClaim was a quota per consumer. One claim referenced by 8 pods
(vgpu_scheduling: dra): cgpu-monitor gave every consumer the claim's whole quota, and 8 pods held
1400 MiB each on one 1000 MiB claim, each under 1000 + 512 MiB, none evicted.

Two doors, both tested here through the real code: the DRA driver's prepare refuses a claim more
than one container uses (the claim and its pods from the driver's API fake: tests/k8s has the real
API server), and cgpu-monitor holds the consumers of one allocation to its one quota together:
the quota the driver's ClaimPreparer wrote, read back through a real PodResources server listing
the 8 pods with the claim's one CDI device. NVML is the component tests' fake (no GPU here), /proc
a folder of cgroup files, the API server the recording fake.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Exporter, FakeDraApi, RecordingPodApi, allocated_claim, cgroup_of, gpu_pod
from vgpu_components import dra
from vgpu_components.dra import PrepareError
from vgpu_components.dra_claims import ClaimPreparer
from vgpu_components.enforcement import Enforcer
from vgpu_components.nvml import Gpu

MIB = 1024 * 1024
H200 = Gpu(uuid="GPU-2a1d5f0e-98c4-4c7e-9b1f-5d6e7f809a1b", index=0, total_mib=143771, name="NVIDIA H200")
CLAIM_UID = "9d6e8f1a-2b3c-4d5e-8f90-0a1b2c3d4e5f"


def claim_for(pods: list[str]) -> dict:
    return allocated_claim(
        "shared",
        CLAIM_UID,
        "node-a",
        [("gpu", "gpu-0", "1000Mi")],
        namespace="team",
        reserved_for=[(name, f"uid-{name}") for name in pods],
    )


def pod(name: str) -> dict:
    return {
        "metadata": {"namespace": "team", "name": name, "uid": f"uid-{name}"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}]},
        "status": {"phase": "Running"},
    }


def test_the_driver_refuses_a_claim_eight_pods_share(short_tmp: Path) -> None:
    exporter = Exporter(short_tmp, [H200])
    try:
        api = FakeDraApi()
        names = [f"share-{n}" for n in range(8)]
        api.claims[("team", "shared")] = claim_for(names)
        for name in names:
            api.pods[("team", name)] = pod(name)
        preparer = ClaimPreparer(exporter.cfg, [H200], "node-a", api=api)
        with pytest.raises(PrepareError, match=r"is used by 8 containers .* one container's GPU-memory quota"):
            preparer.prepare("team", CLAIM_UID, "shared")
        assert not list((Path(exporter.cfg["state_dir"]) / "quotas").glob("*.conf"))
    finally:
        exporter.stop()


def test_eight_pods_on_one_claim_are_held_to_its_one_quota_together(short_tmp: Path) -> None:
    exporter = Exporter(short_tmp, [H200])
    try:
        cfg = exporter.cfg
        cfg["monitor"].update(grace_seconds=30.0)
        # What the driver prepared for the claim's one consumer; 7 more pods were handed it later
        # (kubelet prepares a claim once per node and gives it to every pod that names it).
        api = FakeDraApi()
        api.claims[("team", "shared")] = claim_for(["share-0"])
        api.pods[("team", "share-0")] = pod("share-0")
        (device,) = ClaimPreparer(cfg, [H200], "node-a", api=api).prepare("team", CLAIM_UID, "shared")
        cdi = f"{dra.cdi_kind(cfg)}={device.alloc_id}"
        pods = RecordingPodApi()
        proc = short_tmp / "proc"
        enforcer = Enforcer(cfg, "node-a", exporter.backend, pods, proc, quotas=exporter.collector.quotas)
        for n in range(8):
            running = gpu_pod(f"share-{n}", 0, container_id=f"{n:x}" * 64)
            pods.pods.append(running)
            cgroup_of(proc, 100 + n, running, f"{n:x}" * 64)
            exporter.backend.process_mib[H200.uuid][100 + n] = 1400
            exporter.pod_resources.claims.append(("team", f"share-{n}", "main", dra.driver_name(cfg), "gpu-0", [cdi]))

        assert enforcer.check(now=0) == []
        enforcer.check(now=30)
        assert sorted(pods.evictions) == [("team", f"share-{n}") for n in range(8)]
        assert all("11200 MiB together" in message for _name, _reason, message in pods.events)
    finally:
        exporter.stop()
