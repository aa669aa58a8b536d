"""GPU health for the device plugin: critical Xid events mark a GPU's units Unhealthy, and a GPU
without new ones for xid_recovery_s is healthy again (as NVIDIA's device plugin keeps its health
check apart from the plugin server)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from vgpu_components import kube
from vgpu_components.allocator import DeviceTable
from vgpu_components.nvml import APPLICATION_XIDS, GpuBackend

log = logging.getLogger("vgpu.device_plugin")


class XidHealth:
    """Marks the table's GPUs healthy or not; on_change tells the plugin the device list changed."""

    def __init__(
        self,
        table: DeviceTable,
        recovery_s: float,
        on_change: Callable[[], None],
        *,
        node_api: kube.NodeApi | None = None,
        node: str = "",
    ) -> None:
        self.table = table
        self.recovery_s = recovery_s
        self.on_change = on_change
        self.node_api = node_api
        self.node = node
        self._unhealthy_since: dict[str, float] = {}

    def set_health(self, uuid: str, healthy: bool, reason: str = "") -> None:
        if self.table.set_health(uuid, healthy, reason):
            if healthy:
                log.info("GPU %s is healthy again", uuid)
                self._unhealthy_since.pop(uuid, None)
            else:
                log.error("GPU %s marked unhealthy: %s", uuid, reason)
                kube.try_event(self.node_api, self.node, "GPUUnhealthy", f"GPU {uuid}: {reason}")
            self.on_change()

    def run(self, backend: GpuBackend, stopping: threading.Event) -> None:
        """Follow the backend's Xid events until stopping is set."""
        failures = 0
        while not stopping.is_set():
            try:
                events = backend.wait_xid(1000)
            except Exception as exc:
                failures += 1
                if failures == 1 or failures % 100 == 0:
                    log.warning("Xid event wait failed (%d times): %s", failures, exc)
                stopping.wait(5)
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
                if now - since >= self.recovery_s:
                    self._unhealthy_since.pop(uuid, None)
                    self.set_health(uuid, True)
