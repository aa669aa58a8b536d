"""The device plugin's v1beta1 gRPC services, one per resource it advertises, and the message budget.

<prefix>/gpu-memory: its units, placed by GetPreferredAllocation, and the container contract.
<prefix>/gpu-cores (nodes with compute shares): a container's share is the number of its tokens.
The services answer kubelet; what they allocate and record is the plugin's (plugin.py).
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Protocol

import grpc

from vgpu_components import ids, mps_requests, names, protos
from vgpu_components.allocator import AllocationError, DeviceTable
from vgpu_components.container import Allocation, build_allocation
from vgpu_components.host_paths import HostPaths
from vgpu_components.mps_contract import MpsContract
from vgpu_components.shares import ShareLedger, ShareTokens

log = logging.getLogger("vgpu.device_plugin")


class AdvertiseError(RuntimeError):
    """The node cannot be advertised as configured (e.g. the unit is too small for the message budget)."""


def resource_name(cfg: dict[str, Any]) -> str:
    return names.resource(cfg["resource_prefix"], "memory")


def shares_resource_name(cfg: dict[str, Any]) -> str:
    return names.resource(cfg["resource_prefix"], "cores")


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


class Plugin(Protocol):
    """What the services use of the device plugin (plugin.DevicePlugin)."""

    cfg: dict[str, Any]
    table: DeviceTable
    mps: MpsContract | None
    tokens: ShareTokens | None
    mps_ready: bool
    host_paths: HostPaths
    ledger: ShareLedger
    stopping: threading.Event
    changed: threading.Condition
    version: int

    def compute_free(self) -> dict[str, int] | None: ...

    def wait_for_mps(self, allocations: list[Allocation]) -> None: ...

    def share_to_mps(self, alloc_id: str, share: int) -> None: ...

    def poke_publisher(self) -> None: ...


class _Service:
    """What every resource's v1beta1 DevicePlugin service shares (method names are the gRPC ones)."""

    preferred_allocation = False

    def __init__(self, plugin: Plugin) -> None:
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
        except (AllocationError, OSError, mps_requests.MpsNotReady) as exc:
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
                except (OSError, ValueError, mps_requests.MpsNotReady) as exc:
                    self._refuse(context, exc, device_ids)
                    raise
            log.info("allocated a compute share of %d %%", shares[0])
        else:
            plugin.ledger.forget_pending()
        plugin.poke_publisher()
        # The share is the MPS daemon's, not the container's environment's (mps_requests.py).
        return self.msgs.AllocateResponse(container_responses=[self.msgs.ContainerAllocateResponse() for _s in shares])
