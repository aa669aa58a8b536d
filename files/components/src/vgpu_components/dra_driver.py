"""vgpu-dra-driver: GPU memory as a DRA consumable capacity (docs/dra.md), the process.

kube-scheduler allocates the claims itself from the ResourceSlice this driver publishes for its
node (dra_slices.py; dra.py states the rules); kubelet then calls the driver's DRAPlugin service
(dra_services.py: kubelet plugin API v1, registered through kubelet's plugin watcher) to prepare a
claim for the pods on this node: dra_claims.py writes the device plugin's container contract and
hands it to the container runtime as CDI devices, and records what it prepared (dra_records.py).
This module puts them together and runs them as a component.
"""

from __future__ import annotations

import logging
import sys
import threading
from pathlib import Path
from typing import Any

from vgpu_components import component, dra, kube, nvml
from vgpu_components.container import Allocation
from vgpu_components.dra import ClaimDevice
from vgpu_components.dra_claims import ClaimPreparer
from vgpu_components.dra_services import DraServer
from vgpu_components.dra_slices import SlicePublisher
from vgpu_components.mps_contract import node_mps
from vgpu_components.nvml import Gpu

log = logging.getLogger("vgpu.dra_driver")


class DraDriver:
    """The driver of one node: its claims, its gRPC server and its ResourceSlice."""

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
        self.claims = ClaimPreparer(cfg, self.gpus, node, api=api, backend=backend)
        self.server = DraServer(self.name, cfg["dra"], self.claims)
        self.slices = SlicePublisher(cfg, self.gpus, node, api, self.name) if api is not None else None
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    @property
    def socket_path(self) -> Path:
        return self.server.socket_path

    @property
    def registration_path(self) -> Path:
        return self.server.registration_path

    def prepare(self, namespace: str, uid: str, name: str) -> list[ClaimDevice]:
        return self.claims.prepare(namespace, uid, name)

    def unprepare(self, uid: str) -> None:
        self.claims.unprepare(uid)

    def _allocation(self, device: ClaimDevice) -> Allocation:
        return self.claims.allocation(device)

    def publish_slice(self) -> bool:
        """Create or update this node's ResourceSlice when it differs; True when written."""
        assert self.slices is not None, "no Kubernetes API: no ResourceSlice"
        return self.slices.publish()

    def _serve(self) -> None:
        self.server.serve()

    def start(self) -> None:
        restored = self.claims.restore()
        if restored:
            log.info("wrote the CDI specifications of %d prepared claim(s) again", restored)
        self.server.serve()
        self._spawn(self.server.watch, "socket-watch")
        if self.slices is not None:
            self._spawn(self.slices.loop, "slice-publisher")
        self._spawn(self._bound_regions, "region-bounds")

    def _bound_regions(self, stopping: threading.Event) -> None:
        """Every device_plugin.pod_resources_poll_s (the device plugin's poll, which does the same on
        its path): the prepared claims' region files back to their size (host_paths.py)."""
        interval = float(self.cfg["device_plugin"]["pod_resources_poll_s"])
        while not stopping.wait(interval):
            try:
                self.claims.bound_regions()
            except Exception as exc:  # a poll that fails is tried again at the next one
                log.warning("cannot check the claims' region files: %s", exc)

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, args=(self.stopping,), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def healthy(self) -> tuple[bool, str]:
        if not self.server.registered:
            return False, "not registered with kubelet"
        if self.slices is not None and not self.slices.published:
            return False, "the ResourceSlice is not published"
        return True, f"ok, registered; {len(self.gpus)} GPU(s) published"

    def stop(self) -> None:
        """Stop serving. The ResourceSlice stays: the GPUs are still there, and a restarted driver
        finds it unchanged (the uninstall removes it)."""
        self.stopping.set()
        if self.slices is not None:
            self.slices.wake()
        self.server.stop()
        for thread in self._threads:
            thread.join(timeout=3)


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
    healthz = component.healthz(cfg["dra"]["healthz_port"], driver.healthy)
    return component.serve(started, component.Closing(backend), healthz, driver)


def main(argv: list[str] | None = None) -> int:
    return component.main(COMPONENT, run, argv)


if __name__ == "__main__":
    sys.exit(main())
