"""The DRA driver's claims: prepare a claim for this node (the device plugin's container contract,
container.container_contract and host_paths.HostPaths, handed to the container runtime as CDI
devices), record it (dra_records.py), unprepare it, and write the CDI specifications again at start
(they live on a tmpfs)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException

from vgpu_components import dra, kube, mps_requests, nvml
from vgpu_components.container import Allocation, container_contract
from vgpu_components.dra import ClaimDevice, PrepareError
from vgpu_components.dra_records import ClaimRecords
from vgpu_components.host_paths import HostPaths
from vgpu_components.mps_contract import for_node as mps_contract
from vgpu_components.nvml import Gpu

log = logging.getLogger("vgpu.dra_driver")


class ClaimPreparer:
    def __init__(
        self,
        cfg: dict[str, Any],
        gpus: list[Gpu],
        node: str,
        *,
        api: kube.DraApi | None = None,
        backend: nvml.GpuBackend | None = None,
    ) -> None:
        self.cfg = cfg
        self.gpus = gpus
        self.node = node
        self.api = api
        self.kind = dra.cdi_kind(cfg)
        section = cfg["dra"]
        self.cdi_dir = Path(section["cdi_dir"])
        self.nvidia_cdi_dirs = [d.strip() for d in section["nvidia_cdi_dirs"].split(",") if d.strip()]
        self.host_paths = HostPaths(cfg["state_dir"], float(cfg["device_plugin"]["region_gc_grace_s"]))
        self.records = ClaimRecords(cfg["state_dir"])
        # MPS as on the device-plugin path (the node's <prefix>/mps label, else the config): each
        # allocation's own MPS daemon with the thread percentage and the pinned limit at the quota.
        self.mps = mps_contract(cfg, backend, log)
        self.lock = threading.Lock()  # one prepare or unprepare at a time: they share the host paths

    def _by_uuid(self, uuid: str) -> Gpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise PrepareError(f"GPU {uuid} is no longer on this node")

    def allocation(self, device: ClaimDevice) -> Allocation:
        """The container contract of one claimed device (the device plugin's, as a CDI device)."""
        return container_contract(
            device.gpu, device.units, int(self.cfg["unit_mib"]), device.alloc_id, self.cfg, mps=self.mps
        )

    def _from_record(self, record: dict[str, Any]) -> list[ClaimDevice]:
        return [
            ClaimDevice(
                request=d["request"],
                pool=d["pool"],
                device=d["device"],
                share_id=d["share_id"],
                gpu=self._by_uuid(d["gpu_uuid"]),
                units=int(d["units"]),
                alloc_id=d["alloc_id"],
            )
            for d in record["devices"]
        ]

    def _reserved_pods(self, claim: dict[str, Any]) -> list[dict[str, Any]]:
        """The pods the claim is reserved for that exist (same UID) and have not finished."""
        meta = claim["metadata"]
        pods = []
        for ref in (claim.get("status") or {}).get("reservedFor") or []:
            if ref.get("resource") != "pods" or ref.get("apiGroup"):
                continue
            assert self.api is not None
            try:
                pod = self.api.get_pod(meta["namespace"], ref["name"])
            except ApiException as exc:
                if exc.status == 404:
                    continue  # gone already: nothing of it will start
                raise PrepareError(f"cannot read pod {meta['namespace']}/{ref['name']}: {exc.reason}") from None
            if pod["metadata"].get("uid") != ref.get("uid"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue  # its containers have ended: they hold nothing of the quota
            pods.append(pod)
        return pods

    @staticmethod
    def _one_consumer(claim: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        """Refuse a claim more than one container uses (issue 40): one allocation is one
        container's quota, and every consumer of a shared one would be held to all of it."""
        meta = claim["metadata"]
        consumers = [who for pod in pods for who in dra.claim_consumers(pod, meta["name"])]
        if len(consumers) > 1:
            raise PrepareError(dra.shared_claim_error(meta["namespace"], meta["name"], consumers))

    def _aliases(
        self, claim: dict[str, Any], devices: list[ClaimDevice], pods: list[dict[str, Any]]
    ) -> dict[str, list[str]]:
        """alloc-id -> the CDI names the claim's pods can compute for it (containerd 1.6)."""
        out: dict[str, list[str]] = {d.alloc_id: [] for d in devices}
        for pod in pods:
            for pod_claim in dra.pod_claim_names(pod, claim["metadata"]["name"]):
                for device in devices:
                    out[device.alloc_id].append(dra.pod_alias(pod["metadata"]["uid"], pod_claim, device.request))
        return out

    def _write_cdi(self, uid: str, devices: list[ClaimDevice], aliases: dict[str, list[str]]) -> Path:
        gpu_edits = dra.nvidia_gpu_edits(self.nvidia_cdi_dirs)
        entries = [([d.alloc_id, *aliases.get(d.alloc_id, [])], self.allocation(d)) for d in devices]
        spec = dra.cdi_spec(self.kind, entries, gpu_edits)
        path = dra.cdi_spec_file(self.cdi_dir, self.kind, uid)
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        # Runtimes read every *.json of the folder: write aside, then rename into place.
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(dra.dumps(spec), encoding="utf-8")
        tmp.chmod(0o644)
        tmp.replace(path)
        return path

    def _prepare_host(self, allocations: list[Allocation]) -> None:
        """The allocations' host paths, and on an MPS node their running MPS daemons (mps_requests.py): a
        container must not start before its daemon, or its CUDA runs without MPS, unlimited."""
        self.host_paths.prepare(allocations)
        if self.mps is None:
            return
        try:
            for allocation in allocations:
                if allocation.mps_request is not None:
                    mps_requests.wait_ready(self.mps.pipe_dir, allocation.mps_request, self.mps.start_timeout_s)
        except mps_requests.MpsNotReady as exc:
            for allocation in allocations:
                self.host_paths.retire(allocation.alloc_id)
            raise PrepareError(str(exc)) from None

    def prepare(self, namespace: str, uid: str, name: str) -> list[ClaimDevice]:
        """Prepare one claim for this node, or find it prepared already (kubelet may ask again)."""
        with self.lock:
            record = self.records.load(uid)
            if record is not None:
                devices = self._from_record(record)
                missing = [d for d in devices if not self.host_paths.containers.joinpath(d.alloc_id).is_dir()]
                if missing:
                    self._prepare_host([self.allocation(d) for d in missing])
                self._write_cdi(uid, devices, record.get("aliases") or {})
                return devices
            if self.api is None:
                raise PrepareError("no Kubernetes API: cannot read the claim")
            claim = self.api.get_claim(namespace, name)
            if claim["metadata"].get("uid") != uid:
                raise PrepareError(
                    f"ResourceClaim {namespace}/{name} has UID {claim['metadata'].get('uid')}, kubelet asked for "
                    f"{uid}: the claim was deleted and created again"
                )
            devices = dra.claim_devices(claim, self.node, self.gpus, self.cfg)
            pods = self._reserved_pods(claim)
            self._one_consumer(claim, pods)
            aliases = self._aliases(claim, devices, pods)
            allocations = [self.allocation(d) for d in devices]
            self._prepare_host(allocations)
            try:
                self._write_cdi(uid, devices, aliases)
                self.records.save(
                    uid,
                    {
                        "namespace": namespace,
                        "name": name,
                        "uid": uid,
                        "devices": [d.record() for d in devices],
                        "aliases": aliases,
                    },
                )
            except OSError:
                for allocation in allocations:
                    self.host_paths.retire(allocation.alloc_id)
                dra.cdi_spec_file(self.cdi_dir, self.kind, uid).unlink(missing_ok=True)
                raise
        for device in devices:
            log.info(
                "prepared %d MiB of %s for %s/%s",
                device.units * int(self.cfg["unit_mib"]),
                device.gpu.uuid,
                namespace,
                name,
                extra={"claim": uid, "alloc_id": device.alloc_id, "request": device.request},
            )
        return devices

    def bound_regions(self) -> list[str]:
        """The prepared claims' region files cut back to their size (host_paths.bound_regions)."""
        with self.lock:
            return self.host_paths.bound_regions()

    def unprepare(self, uid: str) -> None:
        """Remove what prepare made for a claim; a claim never prepared here is fine."""
        with self.lock:
            record = self.records.load(uid)
            if record is None:
                return
            for device in record["devices"]:
                self.host_paths.retire(device["alloc_id"])
            dra.cdi_spec_file(self.cdi_dir, self.kind, uid).unlink(missing_ok=True)
            self.records.delete(uid)
        log.info("unprepared claim %s/%s", record.get("namespace"), record.get("name"), extra={"claim": uid})

    def restore(self) -> int:
        """Write the CDI specifications of every recorded claim again (after a reboot /var/run is empty)."""
        restored = 0
        for record in self.records.all():
            try:
                self._write_cdi(record["uid"], self._from_record(record), record.get("aliases") or {})
                restored += 1
            except (PrepareError, OSError, KeyError) as exc:
                log.error("cannot restore the CDI specification of claim %s: %s", record.get("uid"), exc)
        return restored
