"""nvidia-shared-device-plugin: advertises GPU memory to kubelet as <prefix>/gpu-memory units, and on
nodes with compute shares each container's share of a GPU as <prefix>/gpu-cores.

Device plugin API v1beta1 over gRPC, one unix socket per resource in the kubelet's device-plugin
folder. GPU choice travels in the memory device IDs (`<gpu-key>-<n>`), so Allocate needs no API
call and no guess about which pod it serves; a share is the number of its tokens (shares.py).
Per-GPU capacity and use go to the node annotation `<prefix>/gpus` for the scheduler extender,
from the kubelet PodResources API.
"""

from __future__ import annotations

import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from vgpu_components import __version__, config, health, ids, kube, mps, nvml, protos
from vgpu_components.allocator import (
    Allocation,
    AllocationError,
    DeviceTable,
    MpsContract,
    build_allocation,
    mps_contract,
    node_mps,
)
from vgpu_components.host_paths import HostPaths
from vgpu_components.mps import READY_FILE
from vgpu_components.nvml import APPLICATION_XIDS, Gpu, GpuBackend
from vgpu_components.podresources import ContainerDevices, PodResourcesClient
from vgpu_components.shares import ShareLedger, ShareTokens, holders

log = logging.getLogger("vgpu.device_plugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
# Our answers to GetPreferredAllocation requests can be large; kubelet's lists of available IDs too.
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


class AdvertiseError(RuntimeError):
    """The node cannot be advertised as configured (e.g. the unit is too small for the message budget)."""


def resource_name(cfg: dict[str, Any]) -> str:
    return f"{cfg['resource_prefix']}/gpu-memory"


def shares_resource_name(cfg: dict[str, Any]) -> str:
    return f"{cfg['resource_prefix']}/gpu-cores"


def socket_name(cfg: dict[str, Any], resource: str = "gpu-memory") -> str:
    return f"{cfg['resource_prefix']}-{resource}.sock"


def list_and_watch_message(devices: list[tuple[str, str]]) -> Any:
    msgs = protos.deviceplugin()[0]
    return msgs.ListAndWatchResponse(devices=[msgs.Device(ID=dev, health=h) for dev, h in devices])


def check_message_size(table: DeviceTable, budget: int) -> int:
    """Size in bytes of the full ListAndWatch message; AdvertiseError when it exceeds the budget."""
    size = int(list_and_watch_message(table.devices()).ByteSize())
    if size > budget:
        units = sum(slot.units for slot in table.gpus())
        # The size is close to linear in the unit count, so scale the unit up by the overshoot.
        suggested = math.ceil(table.unit_mib * size / budget)
        raise AdvertiseError(
            f"refusing to advertise: {units} units of {table.unit_mib} MiB make a {size}-byte ListAndWatch "
            f"message, over the {budget}-byte budget (kubelet drops messages over 4 MiB and the resource "
            f"would show 0); set unit_mib to at least {suggested}"
        )
    return size


class _Service:
    """What every resource's v1beta1 DevicePlugin service shares (method names are the gRPC ones)."""

    preferred_allocation = False

    def __init__(self, plugin: DevicePlugin) -> None:
        self.plugin = plugin
        self.msgs = protos.deviceplugin()[0]

    def devices(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return self.msgs.DevicePluginOptions(
            pre_start_required=False, get_preferred_allocation_available=self.preferred_allocation
        )

    def ListAndWatch(self, request: Any, context: Any) -> Any:
        plugin = self.plugin
        sent = -1

        def news() -> bool:
            return plugin.version != sent or plugin.stopping.is_set()

        log.info("kubelet opened ListAndWatch", extra={"service": type(self).__name__})
        while context.is_active() and not plugin.stopping.is_set():
            with plugin.changed:
                plugin.changed.wait_for(news, timeout=1.0)
                version = plugin.version
            if version != sent and not plugin.stopping.is_set():
                sent = version
                yield list_and_watch_message(self.devices())
        log.info("ListAndWatch stream ended")

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        # Registered with get_preferred_allocation_available=False: kubelet does not ask.
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "this resource has no preferred allocation")

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return self.msgs.PreStartContainerResponse()

    def _refuse(self, context: Any, exc: Exception, device_ids: list[str]) -> None:
        log.error("Allocate refused: %s", exc, extra={"device_ids": device_ids[:8]})
        self.plugin.ledger.forget_pending()
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


class DevicePluginService(_Service):
    """<prefix>/gpu-memory: the units, placed by GetPreferredAllocation, and the container contract."""

    preferred_allocation = True

    def devices(self) -> list[tuple[str, str]]:
        return self.plugin.table.devices()

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        compute_free = self.plugin.compute_free()
        out = []
        for req in request.container_requests:
            picked = self.plugin.table.preferred(
                list(req.available_deviceIDs),
                list(req.must_include_deviceIDs),
                int(req.allocation_size),
                compute_free,
            )
            out.append(self.msgs.ContainerPreferredAllocationResponse(deviceIDs=picked))
        return self.msgs.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request: Any, context: Any) -> Any:
        """Every container of the request gets its allocation, or the call is refused and leaves
        nothing on the host."""
        plugin = self.plugin
        device_ids: list[str] = []
        # Its compute share, where kubelet allocated it first (shares.py pairs the two Allocates).
        share = plugin.ledger.pending_share() if len(request.container_requests) == 1 else None
        try:
            allocations = []
            for req in request.container_requests:
                device_ids = list(req.devices_ids)
                allocations.append(build_allocation(plugin.table, device_ids, plugin.cfg, plugin.mps, share))
            plugin.host_paths.prepare(allocations)
            plugin.wait_for_mps(allocations)
        except (AllocationError, OSError, mps.MpsNotReady) as exc:
            self._refuse(context, exc, device_ids)
            raise  # abort() raises already; this keeps the flow explicit
        responses = []
        for alloc in allocations:
            log.info(
                "allocated %d MiB on %s",
                alloc.limit_mib,
                alloc.gpu.uuid,
                extra={"alloc_id": alloc.alloc_id, "units": alloc.units},
            )
            responses.append(
                self.msgs.ContainerAllocateResponse(
                    envs=alloc.envs,
                    mounts=[self.msgs.Mount(container_path=c, host_path=h, read_only=ro) for c, h, ro in alloc.mounts],
                )
            )
        if len(allocations) == 1:  # kubelet asks for one container at a time
            plugin.ledger.memory_allocated(allocations[0].alloc_id, ids.gpu_key(allocations[0].gpu.uuid))
        else:
            plugin.ledger.forget_pending()
        plugin.poke_publisher()
        return self.msgs.AllocateResponse(container_responses=responses)


class SharesService(_Service):
    """<prefix>/gpu-cores: a container's share is the number of its tokens; any tokens will do."""

    def devices(self) -> list[tuple[str, str]]:
        plugin = self.plugin
        assert plugin.tokens is not None
        return plugin.tokens.devices(sum(s.healthy for s in plugin.table.gpus()), plugin.mps_ready)

    def Allocate(self, request: Any, context: Any) -> Any:
        plugin = self.plugin
        assert plugin.tokens is not None
        device_ids: list[str] = []
        shares = []
        try:
            for req in request.container_requests:
                device_ids = list(req.devices_ids)
                shares.append(plugin.tokens.share(device_ids))
        except AllocationError as exc:
            self._refuse(context, exc, device_ids)
            raise
        if len(shares) == 1:
            memory = plugin.ledger.share_allocated(shares[0])
            if memory is not None:  # its memory came first: its MPS daemon takes the share now
                try:
                    plugin.share_to_mps(memory.alloc_id, shares[0])
                except (OSError, ValueError, mps.MpsNotReady) as exc:
                    self._refuse(context, exc, device_ids)
                    raise
            log.info("allocated a compute share of %d %%", shares[0])
        else:
            plugin.ledger.forget_pending()
        plugin.poke_publisher()
        # The share is the MPS daemon's, not the container's environment's (mps.py).
        return self.msgs.AllocateResponse(container_responses=[self.msgs.ContainerAllocateResponse() for _s in shares])


@dataclass
class Endpoint:
    """One resource this plugin serves: its socket and the service behind it."""

    resource: str
    socket_path: Path
    service: Callable[[DevicePlugin], _Service]
    server: grpc.Server | None = None


class DevicePlugin:
    """Serves the plugin sockets, registers with kubelet, follows kubelet restarts, health and use."""

    def __init__(
        self,
        cfg: dict[str, Any],
        gpus: list[Gpu],
        node: str,
        *,
        backend: GpuBackend | None = None,
        node_api: kube.NodeApi | None = None,
        pod_resources: PodResourcesClient | None = None,
    ) -> None:
        self.cfg = cfg
        self.node = node
        self.backend = backend
        self.node_api = node_api
        self.pod_resources = pod_resources
        section = cfg["device_plugin"]
        self.plugin_dir = Path(section["kubelet_dir"])
        self.socket_path = self.plugin_dir / socket_name(cfg)
        self.kubelet_socket = self.plugin_dir / KUBELET_SOCKET
        self.table = DeviceTable(gpus, cfg["unit_mib"], cfg["reserved_mib"])
        self.host_paths = HostPaths(cfg["state_dir"], float(section["region_gc_grace_s"]))
        self.message_bytes = check_message_size(self.table, section["max_message_bytes"])
        self.mps, self.tokens = self._mps_contract(backend)
        self.ledger = ShareLedger()
        self.endpoints = [Endpoint(resource_name(cfg), self.socket_path, DevicePluginService)]
        if self.tokens is not None:
            sock = self.plugin_dir / socket_name(cfg, "gpu-cores")
            self.endpoints.append(Endpoint(shares_resource_name(cfg), sock, SharesService))
        self.mps_ready = self._mps_ready()
        self.stopping = threading.Event()
        self.changed = threading.Condition()
        self.version = 0
        self.registered = False
        self.registrations = 0
        self._kubelet_id: tuple[int, int] | None = None
        self._retry_at = 0.0  # after a failed registration, wait a moment before the next try
        self._unhealthy_since: dict[str, float] = {}
        self._publish_wake = threading.Event()
        self._last_annotation = ""
        self._last_publish = 0.0
        self._threads: list[threading.Thread] = []

    def _mps_contract(self, backend: GpuBackend | None) -> tuple[MpsContract | None, ShareTokens | None]:
        """What MPS adds to the containers of this node, and the share tokens when it has shares."""
        section = self.cfg["device_plugin"]
        shares = bool(section["compute_shares"])
        contract = mps_contract(self.cfg, backend, log, shares=shares)
        if contract is None:
            return None, None
        tokens = ShareTokens(len(self.table.gpus()), int(section["cores_per_gpu"])) if shares else None
        return contract, tokens

    def wait_for_mps(self, allocations: list[Allocation]) -> None:
        """Wait until nvidia-mps runs each allocation's MPS daemon; on MpsNotReady retire them all."""
        if self.mps is None:
            return
        try:
            for allocation in allocations:
                if allocation.mps_request is not None:
                    mps.wait_ready(self.mps.pipe_dir, allocation.mps_request, self.mps.start_timeout_s)
        except mps.MpsNotReady:
            for allocation in allocations:
                self.host_paths.retire(allocation.alloc_id)
            raise

    def share_to_mps(self, alloc_id: str, share: int) -> None:
        """Give an allocated container's MPS daemon its compute share, and wait until it has it."""
        assert self.mps is not None
        request = mps.read_request(self.cfg["state_dir"], alloc_id)
        if request is None:
            raise ValueError(f"allocation {alloc_id} has no MPS request to give the share of {share} % to")
        request = mps.replace_share(request, share)
        mps.write_request(self.cfg["state_dir"], request)
        mps.wait_ready(self.mps.pipe_dir, request, self.mps.start_timeout_s)

    def _mps_ready(self) -> bool:
        """The MPS daemon answers (nvidia-mps keeps the ready file in the pipe folder meanwhile)."""
        return self.mps is not None and (Path(self.mps.pipe_dir) / READY_FILE).exists()

    def compute_free(self) -> dict[str, int] | None:
        """Percent of each GPU (by key) no share holds; None on a node without compute shares."""
        if self.tokens is None:
            return None
        used = self.ledger.used()
        return {slot.key: self.tokens.cores_per_gpu - used.get(slot.key, 0) for slot in self.table.gpus()}

    # --- gRPC servers and registration -----------------------------------------------------
    def _serve(self) -> None:
        services = protos.deviceplugin()[1]
        for endpoint in self.endpoints:
            if endpoint.server is not None:
                # Wait: a server still shutting down unlinks its socket path, which by then could be
                # the new server's socket (kubelet then finds none).
                endpoint.server.stop(grace=0).wait(2)
            endpoint.socket_path.unlink(missing_ok=True)
            # One worker is pinned per ListAndWatch stream; keep spare workers for the unary calls.
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=GRPC_OPTIONS)
            services.add_DevicePluginServicer_to_server(endpoint.service(self), server)
            server.add_insecure_port(f"unix://{endpoint.socket_path}")
            server.start()
            endpoint.server = server
            log.info("serving %s on %s", endpoint.resource, endpoint.socket_path)

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = self.kubelet_socket.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_ctime_ns)

    def register(self) -> None:
        msgs, services = protos.deviceplugin()
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = services.RegistrationStub(channel)
            for endpoint in self.endpoints:
                service = endpoint.service(self)
                stub.Register(
                    msgs.RegisterRequest(
                        version=API_VERSION,
                        endpoint=endpoint.socket_path.name,
                        resource_name=endpoint.resource,
                        options=msgs.DevicePluginOptions(
                            get_preferred_allocation_available=service.preferred_allocation
                        ),
                    ),
                    timeout=5,
                )
                log.info(
                    "registered with kubelet",
                    extra={"resource": endpoint.resource, "devices": len(service.devices())},
                )
        self.registered = True
        self.registrations += 1
        log.info("memory ListAndWatch message: %d bytes", self.message_bytes)

    def _ensure_registered(self) -> None:
        """Start or restart serving and registration after a kubelet (re)start or a lost socket."""
        kubelet_id = self._kubelet_identity()
        if kubelet_id is None:
            if self.registered:
                log.warning("kubelet socket %s is gone; waiting for kubelet", self.kubelet_socket)
            self.registered = False
            return
        socket_lost = not all(e.socket_path.exists() for e in self.endpoints)
        if self.registered and kubelet_id == self._kubelet_id and not socket_lost:
            return
        if self.registered:
            log.warning("kubelet restarted or our socket was removed; registering again")
        elif time.monotonic() < self._retry_at:
            return
        self.registered = False
        self._serve()
        try:
            self.register()
        except grpc.RpcError as exc:
            log.error("registration with kubelet failed (retrying in 1 s): %s", exc)
            self._retry_at = time.monotonic() + 1.0
            return
        self._kubelet_id = kubelet_id

    # --- health and use ---------------------------------------------------------------------
    def bump(self) -> None:
        """Tell ListAndWatch streams that the device list changed."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()
        self.poke_publisher()

    def set_health(self, uuid: str, healthy: bool, reason: str = "") -> None:
        if self.table.set_health(uuid, healthy, reason):
            if healthy:
                log.info("GPU %s is healthy again", uuid)
                self._unhealthy_since.pop(uuid, None)
            else:
                log.error("GPU %s marked unhealthy: %s", uuid, reason)
                kube.try_event(self.node_api, self.node, "GPUUnhealthy", f"GPU {uuid}: {reason}")
            self.bump()

    def _health_loop(self) -> None:
        recovery = float(self.cfg["device_plugin"]["xid_recovery_s"])
        failures = 0
        while not self.stopping.is_set():
            assert self.backend is not None
            try:
                events = self.backend.wait_xid(1000)
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 100 == 0:
                    log.warning("Xid event wait failed (%d times): %s", failures, exc)
                self.stopping.wait(5)
                continue
            now = time.monotonic()
            for event in events:
                if event.xid in APPLICATION_XIDS:
                    log.info("application Xid %d on %s ignored", event.xid, event.uuid)
                    continue
                self._unhealthy_since[event.uuid] = now
                self.set_health(event.uuid, False, f"Xid {event.xid}")
            # A GPU without new critical Xids for the quiet period is healthy again.
            for uuid, since in list(self._unhealthy_since.items()):
                if now - since >= recovery:
                    self._unhealthy_since.pop(uuid, None)
                    self.set_health(uuid, True)

    def poke_publisher(self) -> None:
        self._publish_wake.set()

    def annotation(self, used: dict[str, int]) -> str:
        """The `<prefix>/gpus` annotation; on a node with compute shares each GPU also carries
        `cores` (what its shares may add up to) and `used_cores` (what they add up to)."""
        used_cores = self.ledger.used() if self.tokens is not None else {}
        gpus = []
        for slot in self.table.gpus():
            gpu: dict[str, Any] = {
                "uuid": slot.gpu.uuid,
                "index": slot.gpu.index,
                "key": slot.key,
                "total_mib": slot.gpu.total_mib,
                "units": slot.units,
                "used_units": used.get(slot.key, 0),
                "healthy": slot.healthy,
            }
            if self.tokens is not None:
                gpu["cores"] = self.tokens.cores_per_gpu
                gpu["used_cores"] = used_cores.get(slot.key, 0)
            gpus.append(gpu)
        return kube.dumps({"unit_mib": self.table.unit_mib, "gpus": gpus})

    def holders(self) -> list[ContainerDevices] | None:
        """The containers kubelet has handed our units to (PodResources API), with their share
        tokens on a node with compute shares; None without the API."""
        if self.pod_resources is None:
            return None
        shares = [shares_resource_name(self.cfg)] if self.tokens is not None else []
        found = self.pod_resources.list(resource_name(self.cfg), also=shares)
        if self.tokens is not None:
            self.ledger.observe(holders((h.device_ids, h.others.get(shares[0], ())) for h in found))
        return found

    @staticmethod
    def used_units(holders: list[ContainerDevices]) -> dict[str, int]:
        """Units per GPU key held by these containers."""
        used: dict[str, int] = {}
        for holder in holders:
            for dev in holder.device_ids:
                try:
                    key = ids.parse_device_id(dev)[0]
                except ValueError:
                    continue
                used[key] = used.get(key, 0) + 1
        return used

    def publish_once(self) -> bool:
        """Write the node annotation when it changed or is due, and collect the host folders of
        containers kubelet no longer lists; True when the annotation was written."""
        holders = self.holders()
        if holders is not None:
            self.host_paths.collect(ids.alloc_id(h.device_ids) for h in holders)
        text = self.annotation(self.used_units(holders or []))
        refresh = float(self.cfg["device_plugin"]["annotation_refresh_s"])
        if text == self._last_annotation and time.monotonic() - self._last_publish < refresh:
            return False
        if self.node_api is not None:
            self.node_api.annotate_node(self.node, {f"{self.cfg['resource_prefix']}/gpus": text})
        self._last_annotation, self._last_publish = text, time.monotonic()
        return True

    def _publish_loop(self) -> None:
        poll = float(self.cfg["device_plugin"]["pod_resources_poll_s"])
        failures = 0
        while not self.stopping.is_set():
            try:
                if self.publish_once():
                    log.debug("node annotation updated")
                failures = 0
            except Exception as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("publishing GPU use failed (%d times): %s", failures, exc)
            self._publish_wake.wait(poll)
            self._publish_wake.clear()

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        self._ensure_registered()
        if self.backend is not None:
            self._spawn(self._health_loop, "xid-health")
        if self.node_api is not None or self.pod_resources is not None:
            self._spawn(self._publish_loop, "publisher")
        self._spawn(self._watch_loop, "kubelet-watch")

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _watch_loop(self) -> None:
        # Polling at 100 ms re-registers well within a second of a kubelet restart, and turns the
        # share tokens Unhealthy within as long of the MPS daemon going away.
        while not self.stopping.wait(0.1):
            try:
                self._ensure_registered()
            except Exception as exc:
                log.error("re-registration attempt failed: %s", exc)
            ready = self._mps_ready()
            if ready != self.mps_ready:
                self.mps_ready = ready
                if self.tokens is not None:
                    (log.info if ready else log.warning)(
                        "MPS daemon %s: compute shares %s",
                        "ready" if ready else "not ready",
                        "admitted again" if ready else "refused until it is back",
                    )
                    self.bump()

    def healthy(self) -> tuple[bool, str]:
        if not self.registered:
            return False, "not registered with kubelet"
        sick = [s.gpu.uuid for s in self.table.gpus() if not s.healthy]
        return True, f"ok, registered; unhealthy GPUs: {sick or 'none'}"

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        self._publish_wake.set()
        for endpoint in self.endpoints:
            if endpoint.server is not None:
                endpoint.server.stop(grace=1).wait(2)
        for thread in self._threads:
            thread.join(timeout=3)
        for endpoint in self.endpoints:
            endpoint.socket_path.unlink(missing_ok=True)


DESCRIPTION = (
    "Kubernetes device plugin that advertises GPU memory as <resource_prefix>/gpu-memory "
    "units, and on MPS nodes with compute shares <resource_prefix>/gpu-cores (config keys: "
    "resource_prefix, unit_mib, reserved_mib, install_prefix, state_dir and the device_plugin "
    "section). The node name comes from NODE_NAME."
)


def main(argv: list[str] | None = None) -> int:
    started = config.start(
        "nvidia-shared-device-plugin",
        DESCRIPTION,
        __version__,
        argv,
        kubeconfig_help="kubeconfig for node annotation and events (default: in-cluster)",
    )
    if started is None:
        return 2
    args, cfg = started
    node = config.node_name()
    node_api: kube.NodeApi | None = None
    try:
        node_api = kube.KubeNodeApi(kube.api_client(args.kubeconfig), "nvidia-shared-device-plugin")
    except Exception as exc:
        log.warning("no Kubernetes API (%s): the node annotation and events are off", exc)
    node_mps(cfg, node_api, node)
    try:
        backend = nvml.NvmlBackend()
        gpus = backend.gpus()
    except Exception as exc:
        log.error("NVML is not usable (driver missing, or the pod lacks the nvidia runtime?): %s", exc)
        kube.try_event(node_api, node, "GPUMemoryNotAdvertised", f"NVML is not usable: {exc}")
        return 1
    if not gpus:
        log.error("NVML found no GPU on this node; nothing to advertise")
        kube.try_event(node_api, node, "GPUMemoryNotAdvertised", "NVML found no GPU")
        return 1
    log.info("found %d GPU(s)", len(gpus), extra={"gpus": [g.uuid for g in gpus]})
    try:
        plugin = DevicePlugin(
            cfg,
            gpus,
            node,
            backend=backend,
            node_api=node_api,
            pod_resources=PodResourcesClient(cfg["device_plugin"]["pod_resources_socket"]),
        )
    except (AdvertiseError, ValueError) as exc:
        log.error("%s", exc)
        kube.try_event(node_api, node, "GPUMemoryNotAdvertised", str(exc))
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server = health.HealthServer(
        "", cfg["device_plugin"]["healthz_port"], {"/healthz": health.check(plugin.healthy)}
    ).start()
    plugin.start()
    config.wait_for_stop(stop)
    log.info("stopping")
    plugin.stop()
    server.stop()
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
