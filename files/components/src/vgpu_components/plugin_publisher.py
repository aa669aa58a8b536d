"""The node annotation `<prefix>/gpus` the scheduler extender places pods by: each GPU's capacity
and use, written when it changes (or every annotation_refresh_s) and after each Allocate."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from vgpu_components import kube, names
from vgpu_components.allocator import DeviceTable
from vgpu_components.plugin_holders import Holders, used_units
from vgpu_components.shares import ShareLedger, ShareTokens

log = logging.getLogger("vgpu.device_plugin")


class Publisher:
    def __init__(
        self,
        cfg: dict[str, Any],
        table: DeviceTable,
        holders: Holders,
        ledger: ShareLedger,
        tokens: ShareTokens | None,
        *,
        node_api: kube.NodeApi | None = None,
        node: str = "",
    ) -> None:
        self.cfg = cfg
        self.table = table
        self.holders = holders
        self.ledger = ledger
        self.tokens = tokens
        self.node_api = node_api
        self.node = node
        self._wake = threading.Event()
        self._last_annotation = ""
        self._last_publish = 0.0

    def poke(self) -> None:
        """Publish now rather than at the next poll."""
        self._wake.set()

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

    def publish_once(self) -> bool:
        """Write the node annotation when it changed or is due (polling the holders, which also
        collects the host folders of containers gone); True when the annotation was written."""
        found = self.holders.poll()
        text = self.annotation(used_units(found or []))
        refresh = float(self.cfg["device_plugin"]["annotation_refresh_s"])
        if text == self._last_annotation and time.monotonic() - self._last_publish < refresh:
            return False
        if self.node_api is not None:
            self.node_api.annotate_node(self.node, {names.annotation(self.cfg["resource_prefix"], "gpus"): text})
        self._last_annotation, self._last_publish = text, time.monotonic()
        return True

    def run(self, stopping: threading.Event) -> None:
        """Publish every pod_resources_poll_s, or when poked, until stopping is set."""
        poll = float(self.cfg["device_plugin"]["pod_resources_poll_s"])
        failures = 0
        while not stopping.is_set():
            try:
                if self.publish_once():
                    log.debug("node annotation updated")
                failures = 0
            except Exception as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("publishing GPU use failed (%d times): %s", failures, exc)
            self._wake.wait(poll)
            self._wake.clear()
