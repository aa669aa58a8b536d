"""cgpu-monitor, the process: its collector (monitor_collector.py: every sample at scrape time, and
/metrics) and the ground-truth enforcer (enforcement.py), started and stopped together."""

from __future__ import annotations

import logging
import os
import sys

from vgpu_components import component, kube, nvml
from vgpu_components.enforcement import Enforcer
from vgpu_components.monitor_collector import MonitorCollector, serve
from vgpu_components.podresources import PodResourcesClient

log = logging.getLogger("vgpu.monitor")


COMPONENT = component.Component(
    "cgpu-monitor",
    "Prometheus exporter of per-GPU and per-container GPU memory, and enforcer of the quotas from the "
    "driver's per-process accounting (config keys: resource_prefix, unit_mib, state_dir and the monitor "
    "section). The node name comes from NODE_NAME.",
    kubeconfig_help="kubeconfig for the ground-truth enforcement (default: in-cluster config)",
)


def run(started: component.Started) -> int:
    cfg = started.cfg
    node = component.node_name()
    backend: nvml.GpuBackend | None = None
    try:
        backend = nvml.NvmlBackend()
    except Exception as exc:
        log.error("NVML unavailable (%s): exporting container metrics only", exc)
    enforcer = None
    if backend is not None:
        pods: kube.PodApi | None = None
        try:
            pods = kube.KubePodApi(kube.api_client(started.args.kubeconfig), COMPONENT.prog, node)
        except Exception as exc:
            log.error("no Kubernetes API (%s): GPU memory outside quotas is measured but not tied to pods", exc)
        enforcer = Enforcer(cfg, node, backend, pods, namespace=os.environ.get("POD_NAMESPACE", "kube-system"))
    collector = MonitorCollector(
        cfg, node, backend, PodResourcesClient(cfg["monitor"]["pod_resources_socket"]), enforcer
    )
    parts: list[component.Part] = [component.Closing(backend), MetricsServer(collector, cfg["monitor"]["port"])]
    if enforcer is not None:
        enforcer.quotas = collector.quotas  # the containers' quotas, as /metrics sees them
        parts.append(component.Background(lambda: enforcer.run(started.stop), "ground-truth"))
    return component.serve(started, *parts)


class MetricsServer:
    """/metrics and /healthz, which logs the port it serves on once it does (port 0: any free one)."""

    def __init__(self, collector: MonitorCollector, port: int) -> None:
        self.collector = collector
        self.server = serve(collector, port)

    def start(self) -> MetricsServer:
        self.server.start()
        log.info("serving /metrics on port %d", self.server.server_address[1], extra={"gpus": len(self.collector.gpus)})
        return self

    def stop(self) -> None:
        self.server.stop()


def main(argv: list[str] | None = None) -> int:
    return component.main(COMPONENT, run, argv)


if __name__ == "__main__":
    sys.exit(main())
