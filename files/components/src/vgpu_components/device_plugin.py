"""nvidia-shared-device-plugin, the process: finds the node's GPUs (NVML), reads the node's MPS
label, and runs the plugin of the node (plugin.py) with its /healthz, started and stopped together."""

from __future__ import annotations

import logging
import sys

from vgpu_components import component, kube, nvml
from vgpu_components.mps_contract import node_mps
from vgpu_components.plugin import DevicePlugin
from vgpu_components.plugin_services import AdvertiseError
from vgpu_components.podresources import PodResourcesClient

log = logging.getLogger("vgpu.device_plugin")


COMPONENT = component.Component(
    "nvidia-shared-device-plugin",
    "Kubernetes device plugin that advertises GPU memory as <resource_prefix>/gpu-memory "
    "units, and on MPS nodes with compute shares <resource_prefix>/gpu-cores (config keys: "
    "resource_prefix, unit_mib, reserved_mib, install_prefix, state_dir and the device_plugin "
    "section). The node name comes from NODE_NAME.",
    kubeconfig_help="kubeconfig for node annotation and events (default: in-cluster)",
)


def run(started: component.Started) -> int:
    cfg = started.cfg
    node = component.node_name()
    node_api: kube.NodeApi | None = None
    try:
        node_api = kube.KubeNodeApi(kube.api_client(started.args.kubeconfig), COMPONENT.prog)
    except Exception as exc:
        log.warning("no Kubernetes API (%s): the node annotation and events are off", exc)
    node_mps(cfg, node_api, node)
    try:
        backend = nvml.NvmlBackend()
        gpus = backend.gpus()
    except Exception as exc:
        log.error("NVML is not usable (driver missing, or the pod lacks the nvidia runtime?): %s", exc)
        kube.try_event(node_api, node, "GPUMemoryNotAdvertised", f"NVML is not usable: {exc}")
        return component.EXIT_FAILED
    if not gpus:
        log.error("NVML found no GPU on this node; nothing to advertise")
        kube.try_event(node_api, node, "GPUMemoryNotAdvertised", "NVML found no GPU")
        return component.EXIT_FAILED
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
        return component.EXIT_BAD_CONFIG
    healthz = component.healthz(cfg["device_plugin"]["healthz_port"], plugin.healthy)
    return component.serve(started, component.Closing(backend), healthz, plugin)


def main(argv: list[str] | None = None) -> int:
    return component.main(COMPONENT, run, argv)


if __name__ == "__main__":
    sys.exit(main())
