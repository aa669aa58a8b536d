"""vgpu-dra-driver: GPU memory as a DRA consumable capacity (docs/dra.md).

kube-scheduler allocates the claims itself from the ResourceSlice this driver publishes for its
node (dra.py states the rules); kubelet then calls the driver's DRAPlugin service (kubelet plugin
API v1, registered through kubelet's plugin watcher) to prepare a claim for the pods on this node:
the driver writes the device plugin's container contract (allocator.container_contract,
host_paths.HostPaths) and hands it to the container runtime as CDI devices. Unprepare removes it.

What it prepared is recorded under <state_dir>/dra/ (kubelet may unprepare a claim the API server
no longer has, and a second prepare of the same claim must find the same folders), and the CDI
specifications, which live on a tmpfs, are written again from the records at start.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from kubernetes.client.rest import ApiException

from vgpu_components import checkpoint, component, dra, health, kube, mps, nvml, protos
from vgpu_components.allocator import Allocation, container_contract, mps_contract, node_mps
from vgpu_components.dra import ClaimDevice, PrepareError
from vgpu_components.host_paths import HostPaths
from vgpu_components.nvml import Gpu

log = logging.getLogger("vgpu.dra_driver")

PLUGIN_TYPE = "DRAPlugin"
SERVICE = "v1.DRAPlugin"  # kubelet 1.34+ (k8s.io/kubelet/pkg/apis/dra/v1)
SOCKET = "dra.sock"


class ClaimRecords:
    """What the driver prepared, one checkpoint per claim UID under <state_dir>/dra/ (checkpoint.py:
    versioned, checksummed, written by fsync and rename). A record that cannot be trusted is
    refused with its path: prepare and unprepare must not act on it."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "dra"

    def _path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid.startswith("."):
            raise PrepareError(f"claim UID {uid!r} is not a UID")
        return self.folder / f"{uid}.json"

    @staticmethod
    def _legacy(doc: dict[str, Any]) -> bool:
        """A plain record of the releases before checkpoints (read, and rewritten at the next save)."""
        return "uid" in doc and "devices" in doc

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            return checkpoint.read(path, legacy=self._legacy)
        except checkpoint.CheckpointError as exc:
            raise PrepareError(f"the driver's record of this claim cannot be trusted: {exc}") from None

    def load(self, uid: str) -> dict[str, Any] | None:
        try:
            return self._read(self._path(uid))
        except FileNotFoundError:
            return None

    def save(self, uid: str, doc: dict[str, Any]) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        checkpoint.write(self._path(uid), doc)

    def delete(self, uid: str) -> None:
        self._path(uid).unlink(missing_ok=True)

    def all(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            try:
                out.append(self._read(path))
            except PrepareError as exc:
                log.error("%s", exc)
            except OSError as exc:
                log.error("cannot read the driver's record %s: %s", path, exc)
        return out


class DraService:
    """The DRAPlugin v1 service (method names are the gRPC ones). Each claim gets its own answer:
    one that fails carries its error, and kubelet asks again for it alone."""

    def __init__(self, driver: DraDriver) -> None:
        self.driver = driver
        self.msgs = protos.dra()[0]

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        out = {}
        for claim in request.claims:
            try:
                devices = self.driver.prepare(claim.namespace, claim.uid, claim.name)
            except (PrepareError, OSError, ApiException) as exc:
                log.error("prepare of %s/%s failed: %s", claim.namespace, claim.name, exc, extra={"claim": claim.uid})
                out[claim.uid] = self.msgs.NodePrepareResourceResponse(error=str(exc))
                continue
            out[claim.uid] = self.msgs.NodePrepareResourceResponse(devices=[self._device(d) for d in devices])
        return self.msgs.NodePrepareResourcesResponse(claims=out)

    def _device(self, device: ClaimDevice) -> Any:
        msg = self.msgs.Device(
            request_names=[device.request],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=[f"{self.driver.kind}={device.alloc_id}"],
        )
        if device.share_id:
            msg.share_id = device.share_id
        return msg

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        out = {}
        for claim in request.claims:
            try:
                self.driver.unprepare(claim.uid)
                out[claim.uid] = self.msgs.NodeUnprepareResourceResponse()
            except (PrepareError, OSError) as exc:
                log.error("unprepare of %s/%s failed: %s", claim.namespace, claim.name, exc)
                out[claim.uid] = self.msgs.NodeUnprepareResourceResponse(error=str(exc))
        return self.msgs.NodeUnprepareResourcesResponse(claims=out)


class RegistrationService:
    """kubelet's plugin watcher asks who we are on the registration socket, then tells the outcome."""

    def __init__(self, driver: DraDriver) -> None:
        self.driver = driver
        self.msgs = protos.pluginregistration()[0]

    def GetInfo(self, request: Any, context: Any) -> Any:
        return self.msgs.PluginInfo(
            type=PLUGIN_TYPE, name=self.driver.name, endpoint=str(self.driver.socket_path), supported_versions=[SERVICE]
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.driver.registered = bool(request.plugin_registered)
        if request.plugin_registered:
            log.info("registered with kubelet", extra={"driver": self.driver.name})
        else:
            log.error("kubelet refused the registration: %s", request.error)
        return self.msgs.RegistrationStatusResponse()


class DraDriver:
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
        self.gpus = sorted(gpus, key=lambda g: g.index)
        self.node = node
        self.api = api
        self.name = dra.driver_name(cfg)
        self.kind = dra.cdi_kind(cfg)
        section = cfg["dra"]
        self.socket_path = Path(section["plugins_dir"]) / self.name / SOCKET
        self.registration_path = Path(section["registry_dir"]) / f"{self.name}-reg.sock"
        self.cdi_dir = Path(section["cdi_dir"])
        self.nvidia_cdi_dirs = [d.strip() for d in section["nvidia_cdi_dirs"].split(",") if d.strip()]
        self.host_paths = HostPaths(cfg["state_dir"], float(cfg["device_plugin"]["region_gc_grace_s"]))
        self.records = ClaimRecords(cfg["state_dir"])
        # MPS as on the device-plugin path (the node's <prefix>/mps label, else the config): each
        # allocation's own MPS daemon with the thread percentage and the pinned limit at the quota.
        self.mps = mps_contract(cfg, backend, log)
        self.lock = threading.Lock()  # one prepare or unprepare at a time: they share the host paths
        self.registered = False
        self.published = False
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._server: grpc.Server | None = None
        self._threads: list[threading.Thread] = []

    # --- prepare and unprepare ----------------------------------------------------------------
    def _by_uuid(self, uuid: str) -> Gpu:
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise PrepareError(f"GPU {uuid} is no longer on this node")

    def _allocation(self, device: ClaimDevice) -> Allocation:
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

    def _aliases(self, claim: dict[str, Any], devices: list[ClaimDevice]) -> dict[str, list[str]]:
        """alloc-id -> the CDI names the claim's pods can compute for it (containerd 1.6)."""
        meta = claim["metadata"]
        out: dict[str, list[str]] = {d.alloc_id: [] for d in devices}
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
            for pod_claim in dra.pod_claim_names(pod, meta["name"]):
                for device in devices:
                    out[device.alloc_id].append(dra.pod_alias(ref["uid"], pod_claim, device.request))
        return out

    def _write_cdi(self, uid: str, devices: list[ClaimDevice], aliases: dict[str, list[str]]) -> Path:
        gpu_edits = dra.nvidia_gpu_edits(self.nvidia_cdi_dirs)
        entries = [([d.alloc_id, *aliases.get(d.alloc_id, [])], self._allocation(d)) for d in devices]
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
        """The allocations' host paths, and on an MPS node their running MPS daemons (mps.py): a
        container must not start before its daemon, or its CUDA runs without MPS, unlimited."""
        self.host_paths.prepare(allocations)
        if self.mps is None:
            return
        try:
            for allocation in allocations:
                if allocation.mps_request is not None:
                    mps.wait_ready(self.mps.pipe_dir, allocation.mps_request, self.mps.start_timeout_s)
        except mps.MpsNotReady as exc:
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
                    self._prepare_host([self._allocation(d) for d in missing])
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
            aliases = self._aliases(claim, devices)
            allocations = [self._allocation(d) for d in devices]
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

    # --- the ResourceSlice --------------------------------------------------------------------
    def publish_slice(self) -> bool:
        """Create or update this node's ResourceSlice when it differs; True when written."""
        assert self.api is not None
        existing = self.api.list_slices(self.node, self.name)
        name = dra.slice_name(self.node, self.name)
        current = next((s for s in existing if s["metadata"]["name"] == name), None)
        for stale in existing:
            if stale is not current:
                log.info("deleting stale ResourceSlice %s", stale["metadata"]["name"])
                self.api.delete_slice(stale["metadata"]["name"])
        generations = [int(s["spec"]["pool"].get("generation", 0)) for s in existing]
        if current is not None:
            wanted = dra.resource_slice(
                self.node, self.gpus, self.cfg, generation=int(current["spec"]["pool"].get("generation", 0))
            )
            if dra.same_devices(current, wanted):
                self.published = True
                return False
            wanted["spec"]["pool"]["generation"] = max(generations) + 1
            kept = ("resourceVersion", "ownerReferences", "labels")
            wanted["metadata"] = {"name": name, **{k: current["metadata"][k] for k in kept if k in current["metadata"]}}
            self.api.replace_slice(name, wanted)
        else:
            wanted = dra.resource_slice(
                self.node,
                self.gpus,
                self.cfg,
                generation=max(generations, default=0) + 1,
                node_uid=self.api.node_uid(self.node),
            )
            self.api.create_slice(wanted)
        self.published = True
        log.info("published ResourceSlice %s", name, extra={"devices": len(wanted["spec"]["devices"])})
        return True

    def _publish_loop(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                self.publish_slice()
                failures = 0
            except Exception as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("publishing the ResourceSlice failed (%d times): %s", failures, exc)
            self._wake.wait(float(self.cfg["dra"]["resync_s"]) if failures == 0 else 5.0)
            self._wake.clear()

    # --- gRPC server and lifecycle ------------------------------------------------------------
    def _serve(self) -> None:
        if self._server is not None:
            # Wait: a server still shutting down unlinks its socket paths, which by then could be
            # the new server's sockets (kubelet then finds none).
            self._server.stop(grace=0).wait(2)
        dra_services = protos.dra()[1]
        registration_services = protos.pluginregistration()[1]
        for path in (self.socket_path, self.registration_path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dra_services.add_DRAPluginServicer_to_server(DraService(self), server)
        registration_services.add_RegistrationServicer_to_server(RegistrationService(self), server)
        # The service socket first: kubelet dials it as soon as it sees the registration socket.
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.add_insecure_port(f"unix://{self.registration_path}")
        server.start()
        self._server = server
        log.info("serving %s on %s (registration %s)", self.name, self.socket_path, self.registration_path)

    def _watch_loop(self) -> None:
        # A removed socket (kubelet's folder cleaned, a node reset) is made again within a second;
        # kubelet's plugin watcher then registers the driver again.
        while not self.stopping.wait(1.0):
            if not (self.socket_path.exists() and self.registration_path.exists()):
                log.warning("a socket of the driver is gone; serving again")
                self.registered = False
                try:
                    self._serve()
                except Exception as exc:
                    log.error("serving again failed: %s", exc)

    def start(self) -> None:
        restored = self.restore()
        if restored:
            log.info("wrote the CDI specifications of %d prepared claim(s) again", restored)
        self._serve()
        self._spawn(self._watch_loop, "socket-watch")
        if self.api is not None:
            self._spawn(self._publish_loop, "slice-publisher")

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def healthy(self) -> tuple[bool, str]:
        if not self.registered:
            return False, "not registered with kubelet"
        if self.api is not None and not self.published:
            return False, "the ResourceSlice is not published"
        return True, f"ok, registered; {len(self.gpus)} GPU(s) published"

    def stop(self) -> None:
        """Stop serving. The ResourceSlice stays: the GPUs are still there, and a restarted driver
        finds it unchanged (the uninstall removes it)."""
        self.stopping.set()
        self._wake.set()
        if self._server is not None:
            self._server.stop(grace=1).wait(2)
        for thread in self._threads:
            thread.join(timeout=3)
        for path in (self.registration_path, self.socket_path):
            path.unlink(missing_ok=True)


COMPONENT = component.Component(
    "vgpu-dra-driver",
    "Kubernetes DRA driver that publishes each GPU's memory as a consumable capacity of driver "
    "gpu.<resource_prefix> and prepares claims with the device plugin's container contract "
    "(config keys: resource_prefix, unit_mib, reserved_mib, install_prefix, state_dir, the dra section "
    "and the contract settings of the device_plugin section). The node name comes from NODE_NAME.",
    kubeconfig_help="kubeconfig for claims, pods and the ResourceSlice (default: in-cluster)",
)


def run(started: component.Started) -> int:
    cfg = started.cfg
    node = component.node_name()
    try:
        client = kube.api_client(started.args.kubeconfig)
        api = kube.KubeDraApi(client)
    except Exception as exc:
        log.error("no Kubernetes API (%s): the driver cannot read claims or publish its ResourceSlice", exc)
        return component.EXIT_FAILED
    node_mps(cfg, kube.KubeNodeApi(client, COMPONENT.prog), node)
    try:
        backend = nvml.NvmlBackend()
        gpus = backend.gpus()
    except Exception as exc:
        log.error("NVML is not usable (driver missing, or the pod lacks the nvidia runtime?): %s", exc)
        return component.EXIT_FAILED
    if not gpus:
        log.error("NVML found no GPU on this node; nothing to publish")
        return component.EXIT_FAILED
    log.info("found %d GPU(s)", len(gpus), extra={"gpus": [g.uuid for g in gpus]})
    driver = DraDriver(cfg, gpus, node, api=api, backend=backend)
    server = health.HealthServer("", cfg["dra"]["healthz_port"], {"/healthz": health.check(driver.healthy)}).start()
    driver.start()
    started.wait()
    log.info("stopping")
    driver.stop()
    server.stop()
    backend.close()
    return component.EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return component.main(COMPONENT, run, argv)


if __name__ == "__main__":
    sys.exit(main())
