"""The DRA driver's ResourceSlice: each GPU of this node as a device whose memory is a consumable
capacity (dra.py states the rules), published and repaired every dra.resync_s."""

from __future__ import annotations

import logging
import threading
from typing import Any

from vgpu_components import dra, kube
from vgpu_components.nvml import Gpu

log = logging.getLogger("vgpu.dra_driver")


class SlicePublisher:
    def __init__(self, cfg: dict[str, Any], gpus: list[Gpu], node: str, api: kube.DraApi, name: str) -> None:
        self.cfg = cfg
        self.gpus = gpus
        self.node = node
        self.api = api
        self.name = name
        self.published = False
        self._wake = threading.Event()

    def wake(self) -> None:
        self._wake.set()

    def publish(self) -> bool:
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

    def loop(self, stopping: threading.Event) -> None:
        """Publish now and every resync_s (5 s after a failure) until stopping; wake() publishes at once."""
        failures = 0
        while not stopping.is_set():
            try:
                self.publish()
                failures = 0
            except Exception as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log.warning("publishing the ResourceSlice failed (%d times): %s", failures, exc)
            self._wake.wait(float(self.cfg["dra"]["resync_s"]) if failures == 0 else 5.0)
            self._wake.clear()
