"""The device plugin of one node (nvidia-shared-device-plugin): advertises GPU memory to kubelet as
<prefix>/gpu-memory units, and on nodes with compute shares each container's share of a GPU as
<prefix>/gpu-cores.

Device plugin API v1beta1 over gRPC, one unix socket per resource in the kubelet's device-plugin
folder. GPU choice travels in the memory device IDs (`<gpu-key>-<n>`), so Allocate needs no API
call and no guess about which pod it serves; a share is the number of its tokens (shares.py).
Per-GPU capacity and use go to the node annotation `<prefix>/gpus` for the scheduler extender,
from the kubelet PodResources API.

This module puts the plugin together (device_plugin.py runs it); each concern has its own module:
plugin_services.py (the gRPC services), plugin_registration.py (sockets, registration, kubelet
restarts), plugin_health.py (Xid health), plugin_holders.py (PodResources: who holds the units,
the share ledger, folder cleanup) and plugin_publisher.py (the node annotation).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

from vgpu_components import kube, mps_requests
from vgpu_components.allocator import DeviceTable
from vgpu_components.container import Allocation
from vgpu_components.host_paths import HostPaths
from vgpu_components.mps_contract import MpsContract
from vgpu_components.mps_contract import for_node as mps_contract
from vgpu_components.mps_requests import READY_FILE
from vgpu_components.nvml import Gpu, GpuBackend
from vgpu_components.plugin_health import XidHealth
from vgpu_components.plugin_holders import Holders
from vgpu_components.plugin_publisher import Publisher
from vgpu_components.plugin_registration import Endpoint, Registrar
from vgpu_components.plugin_services import (
    DevicePluginService,
    SharesService,
    check_message_size,
    resource_name,
    shares_resource_name,
    socket_name,
)
from vgpu_components.podresources import PodResourcesClient
from vgpu_components.shares import ShareLedger, ShareTokens

log = logging.getLogger("vgpu.device_plugin")


class DevicePlugin:
    """The device table, the MPS contract and the share ledger, with the parts that serve them:
    the endpoints and their registration, Xid health and the node annotation publisher."""

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
        plugin_dir = Path(section["kubelet_dir"])
        self.table = DeviceTable(gpus, cfg["unit_mib"], cfg["reserved_mib"])
        self.host_paths = HostPaths(cfg["state_dir"], float(section["region_gc_grace_s"]))
        self.message_bytes = check_message_size(self.table, section["max_message_bytes"])
        self.mps, self.tokens = self._mps_contract(backend)
        self.ledger = ShareLedger()
        endpoints = [Endpoint(resource_name(cfg), plugin_dir / socket_name(cfg), DevicePluginService(self))]
        if self.tokens is not None:
            sock = plugin_dir / socket_name(cfg, "gpu-cores")
            endpoints.append(Endpoint(shares_resource_name(cfg), sock, SharesService(self)))
        self.registrar = Registrar(plugin_dir, endpoints, self.message_bytes)
        self.health = XidHealth(self.table, float(section["xid_recovery_s"]), self.bump, node_api=node_api, node=node)
        holders = Holders(cfg, pod_resources, self.ledger, self.tokens, self.host_paths)
        self.publisher = Publisher(cfg, self.table, holders, self.ledger, self.tokens, node_api=node_api, node=node)
        self.mps_ready = self._mps_ready()
        self.stopping = threading.Event()
        self.changed = threading.Condition()
        self.version = 0
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
                    mps_requests.wait_ready(self.mps.pipe_dir, allocation.mps_request, self.mps.start_timeout_s)
        except mps_requests.MpsNotReady:
            for allocation in allocations:
                self.host_paths.retire(allocation.alloc_id)
            raise

    def share_to_mps(self, alloc_id: str, share: int) -> None:
        """Give an allocated container's MPS daemon its compute share, and wait until it has it."""
        assert self.mps is not None
        request = mps_requests.read_request(self.cfg["state_dir"], alloc_id)
        if request is None:
            raise ValueError(f"allocation {alloc_id} has no MPS request to give the share of {share} % to")
        request = mps_requests.replace_share(request, share)
        mps_requests.write_request(self.cfg["state_dir"], request)
        mps_requests.wait_ready(self.mps.pipe_dir, request, self.mps.start_timeout_s)

    def _mps_ready(self) -> bool:
        """The MPS daemon answers (nvidia-mps keeps the ready file in the pipe folder meanwhile)."""
        return self.mps is not None and (Path(self.mps.pipe_dir) / READY_FILE).exists()

    def compute_free(self) -> dict[str, int] | None:
        """Percent of each GPU (by key) no share holds; None on a node without compute shares."""
        if self.tokens is None:
            return None
        used = self.ledger.used()
        return {slot.key: self.tokens.cores_per_gpu - used.get(slot.key, 0) for slot in self.table.gpus()}

    def bump(self) -> None:
        """Tell ListAndWatch streams that the device list changed."""
        with self.changed:
            self.version += 1
            self.changed.notify_all()
        self.poke_publisher()

    def poke_publisher(self) -> None:
        self.publisher.poke()

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        self.registrar.plugin_dir.mkdir(parents=True, exist_ok=True)
        self.registrar.ensure()
        if self.backend is not None:
            self._spawn(self.health.run, "xid-health", self.backend)
        if self.node_api is not None or self.pod_resources is not None:
            self._spawn(self.publisher.run, "publisher")
        self._spawn(self._watch_loop, "kubelet-watch")

    def _spawn(self, target: Any, name: str, *args: Any) -> None:
        thread = threading.Thread(target=target, args=(*args, self.stopping), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _watch_loop(self, stopping: threading.Event) -> None:
        # Polling at 100 ms re-registers well within a second of a kubelet restart, and turns the
        # share tokens Unhealthy within as long of the MPS daemon going away.
        while not stopping.wait(0.1):
            try:
                self.registrar.ensure()
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
        if not self.registrar.registered:
            return False, "not registered with kubelet"
        sick = [s.gpu.uuid for s in self.table.gpus() if not s.healthy]
        return True, f"ok, registered; unhealthy GPUs: {sick or 'none'}"

    def stop(self) -> None:
        self.stopping.set()
        with self.changed:
            self.changed.notify_all()
        self.publisher.poke()
        self.registrar.stop_servers()
        for thread in self._threads:
            thread.join(timeout=3)
        self.registrar.remove_sockets()
