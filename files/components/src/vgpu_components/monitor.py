"""cgpu-monitor: Prometheus exporter of GPU memory per GPU and per container on one node.

Per GPU (NVML): total and used memory. Per container holding <prefix>/gpu-memory units, or a
device of the DRA driver through a claim (both from kubelet's PodResources API): quota, used,
context and peak from the interposer's region file, found by the alloc-id rule of
docs/architecture.md (for a claim: the alloc-id in the name of the CDI device the driver prepared,
the quota from its quota file). Containers that have not touched the GPU yet export zeros.
The region is the container's own account; the ground truth, each process's memory as the driver
reports it, is checked against the quota by enforcement.py on its own thread and exported here.
Label names follow dcgm-exporter where they overlap (gpu, UUID, modelName, Hostname, namespace,
pod, container).

One scrape collects at a time. A scrape that cannot finish within monitor.scrape_timeout_s (a
read that never returns) makes the next scrapes answer 503 at once and /healthz unhealthy, so the
gap shows and no thread piles up behind it; region files are read as region.py says (never a
FIFO, folder or symlink).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from vgpu_components import __version__, config, dra, health, host_paths, ids, kube, nvml, region
from vgpu_components.enforcement import Enforcer
from vgpu_components.nvml import Gpu
from vgpu_components.podresources import ContainerClaimDevice, PodResourcesClient

log = logging.getLogger("vgpu.monitor")
MIB = 1024 * 1024
GPU_LABELS = ["gpu", "UUID", "modelName", "Hostname"]
CONTAINER_LABELS = ["namespace", "pod", "container", "gpu", "UUID", "Hostname"]


@dataclass(frozen=True)
class Holder:
    """A container with a GPU-memory quota on this node, through either scheduling path."""

    namespace: str
    pod: str
    container: str
    gpu: Gpu | None  # None: its devices span GPUs, or the GPU is unknown here
    quota_bytes: int
    alloc_id: str


class MonitorCollector(Collector):
    """Builds every sample at scrape time, so series of finished containers disappear at once."""

    def __init__(
        self,
        cfg: dict[str, Any],
        node: str,
        backend: nvml.GpuBackend | None,
        pod_resources: PodResourcesClient | None,
        enforcer: Enforcer | None = None,
    ) -> None:
        self.cfg = cfg
        self.enforcer = enforcer
        self.node = node
        self.backend = backend
        self.pod_resources = pod_resources
        self.resource = f"{cfg['resource_prefix']}/gpu-memory"
        self.dra_driver = dra.driver_name(cfg)
        self.claim_prefix = f"{dra.cdi_kind(cfg)}="
        self.gpus: list[Gpu] = backend.gpus() if backend is not None else []
        self.by_key = {ids.gpu_key(g.uuid): g for g in self.gpus}
        self.region_errors = 0
        self.pod_resources_errors = 0
        self.last_ok = True
        self.scrape_timeout_s = float(cfg["monitor"]["scrape_timeout_s"])
        self._scraping = threading.Lock()
        self._scrape_started: float | None = None  # monotonic start of the scrape in progress

    def collect(self) -> list[Any]:
        """Every family, built by one scrape at a time; ScrapeStuck when an earlier scrape has not
        finished within the timeout."""
        if not self._scraping.acquire(timeout=self.scrape_timeout_s):
            raise ScrapeStuck(self.stuck_reason())
        try:
            self._scrape_started = time.monotonic()
            families = [*self._gpu_metrics(), *self._container_metrics(), *self._ground_truth_metrics()]
            errors = CounterMetricFamily("vgpu_monitor_errors", "Failed reads by source", labels=["source"])
            errors.add_metric(["region"], self.region_errors)
            errors.add_metric(["pod_resources"], self.pod_resources_errors)
            families.append(errors)
            return families
        finally:
            self._scrape_started = None
            self._scraping.release()

    def stuck_reason(self) -> str:
        """Why scrapes cannot complete, or "" when they can."""
        started = self._scrape_started
        if started is None or time.monotonic() - started <= self.scrape_timeout_s:
            return ""
        return (
            f"a scrape has been running for {time.monotonic() - started:.0f} s "
            f"(monitor.scrape_timeout_s {self.scrape_timeout_s:g}); a read on this node does not return"
        )

    def healthy(self) -> tuple[bool, str]:
        stuck = self.stuck_reason()
        if stuck:
            return False, stuck
        return self.last_ok, "ok" if self.last_ok else "the last PodResources List failed"

    def _gpu_metrics(self) -> Iterator[Any]:
        total = GaugeMetricFamily("vgpu_gpu_memory_total_bytes", "GPU memory size (NVML)", labels=GPU_LABELS)
        used = GaugeMetricFamily("vgpu_gpu_memory_used_bytes", "GPU memory in use on the GPU (NVML)", labels=GPU_LABELS)
        for gpu in self.gpus:
            labels = [str(gpu.index), gpu.uuid, gpu.name, self.node]
            assert self.backend is not None
            try:
                mem = self.backend.memory(gpu.uuid)
            except Exception as exc:
                log.warning("NVML memory query for %s failed: %s", gpu.uuid, exc)
                continue
            total.add_metric(labels, mem.total_mib * MIB)
            used.add_metric(labels, mem.used_mib * MIB)
        yield total
        yield used

    def _container_metrics(self) -> Iterator[Any]:
        names = {
            "quota": ("vgpu_container_memory_quota_bytes", "GPU memory quota of the container"),
            "used": ("vgpu_container_memory_used_bytes", "GPU memory the container's live allocations use"),
            "context": ("vgpu_container_memory_context_bytes", "GPU memory of the container's CUDA contexts"),
            "peak": ("vgpu_container_memory_peak_bytes", "Highest used + context memory seen"),
        }
        families = {k: GaugeMetricFamily(n, h, labels=CONTAINER_LABELS) for k, (n, h) in names.items()}
        ooms = CounterMetricFamily(
            "vgpu_container_oom_refusals", "Allocations refused because of the quota", labels=CONTAINER_LABELS
        )
        allocated: dict[str, int] = {}
        for holder in self._holders():
            gpu = holder.gpu
            gpu_index, uuid = (str(gpu.index), gpu.uuid) if gpu else ("", "")
            labels = [holder.namespace, holder.pod, holder.container, gpu_index, uuid, self.node]
            allocated[uuid] = allocated.get(uuid, 0) + holder.quota_bytes
            families["quota"].add_metric(labels, holder.quota_bytes)
            try:
                sample = self._read_region(holder.alloc_id)
            except region.RegionBusy:
                continue  # a torn read costs this container one sample
            usage = sample.devices[0] if sample and sample.devices else None
            families["used"].add_metric(labels, usage.used_bytes if usage else 0)
            families["context"].add_metric(labels, usage.ctx_bytes if usage else 0)
            families["peak"].add_metric(labels, usage.peak_bytes if usage else 0)
            ooms.add_metric(labels, usage.oom_count if usage else 0)
        yield from families.values()
        yield ooms
        alloc = GaugeMetricFamily(
            "vgpu_gpu_memory_allocated_bytes", "GPU memory handed out as container quotas", labels=GPU_LABELS
        )
        for gpu in self.gpus:
            alloc.add_metric([str(gpu.index), gpu.uuid, gpu.name, self.node], allocated.get(gpu.uuid, 0))
        yield alloc

    def _holders(self) -> list[Holder]:
        """The containers with a quota on either path, from one PodResources List; [] when kubelet fails."""
        if self.pod_resources is None:
            return []
        try:
            devices, claims = self.pod_resources.list_both(self.resource, self.dra_driver)
            self.last_ok = True
        except Exception as exc:
            self.pod_resources_errors += 1
            self.last_ok = False
            log.warning("PodResources List failed: %s", exc)
            return []
        unit_bytes = int(self.cfg["unit_mib"]) * MIB
        out = []
        for held in devices:
            keys = {ids.parse_device_id(d)[0] for d in held.device_ids if _ours(d)}
            gpu = self.by_key.get(min(keys)) if len(keys) == 1 else None
            quota = len(held.device_ids) * unit_bytes
            out.append(Holder(held.namespace, held.pod, held.container, gpu, quota, ids.alloc_id(held.device_ids)))
        return out + self._claim_holders(claims)

    def _claim_holders(self, claims: Iterable[ContainerClaimDevice]) -> list[Holder]:
        """The containers of these DRA claim devices of our driver, with their quotas."""
        by_device = {dra.device_name(g): g for g in self.gpus}
        out = []
        for claim in claims:
            # The driver names the CDI device of an allocation <kind>=<alloc-id> (dra_driver.py); its
            # other names are aliases for runtimes that take CDI names from the pod.
            for name in claim.cdi_devices:
                alloc_id = name.removeprefix(self.claim_prefix)
                if name.startswith(self.claim_prefix) and ids.is_alloc_id(alloc_id):
                    quota_mib = host_paths.read_quota_mib(self.cfg["state_dir"], alloc_id) or 0
                    gpu = by_device.get(claim.device)
                    out.append(Holder(claim.namespace, claim.pod, claim.container, gpu, quota_mib * MIB, alloc_id))
        return out

    def claim_quotas(self) -> dict[tuple[str, str, str], int]:
        """(namespace, pod, container) -> quota in bytes of each container of a DRA claim, for the
        enforcer (a container using two claims' devices has their sum)."""
        quotas: dict[tuple[str, str, str], int] = {}
        if self.pod_resources is None:
            return quotas
        for holder in self._claim_holders(self.pod_resources.claim_devices(self.dra_driver)):
            key = (holder.namespace, holder.pod, holder.container)
            quotas[key] = quotas.get(key, 0) + holder.quota_bytes
        return quotas

    def _ground_truth_metrics(self) -> Iterator[Any]:
        """What the enforcer's last check saw: NVML's per-process truth, summed per container."""
        if self.enforcer is None:
            return
        seen = self.enforcer.latest
        names = {
            "real": (
                "vgpu_container_memory_real_bytes",
                "GPU memory the container's processes hold (NVML, per process)",
            ),
            "limit": ("vgpu_container_memory_limit_bytes", "Quota plus the context allowance of its processes"),
            "over": ("vgpu_container_over_quota_seconds", "How long the container has been over its limit (0: not)"),
        }
        families = {k: GaugeMetricFamily(n, h, labels=CONTAINER_LABELS) for k, (n, h) in names.items()}
        index = {g.uuid: str(g.index) for g in self.gpus}
        for usage in seen.usages:
            who = usage.container
            uuids = sorted(usage.gpus)
            gpus = ",".join(index.get(u, "") for u in uuids)
            labels = [who.namespace, who.pod, who.container, gpus, ",".join(uuids), self.node]
            families["real"].add_metric(labels, usage.used_bytes)
            families["limit"].add_metric(labels, seen.limits.get(who, 0))
            families["over"].add_metric(labels, seen.over_seconds.get(who, 0.0))
        yield from families.values()
        unaccounted = GaugeMetricFamily(
            "vgpu_gpu_memory_unaccounted_bytes",
            "GPU memory of processes in no container with a quota (the host, the MPS server, pods without units)",
            labels=GPU_LABELS,
        )
        for gpu in self.gpus:
            unaccounted.add_metric([str(gpu.index), gpu.uuid, gpu.name, self.node], seen.unaccounted.get(gpu.uuid, 0))
        yield unaccounted
        actions = CounterMetricFamily(
            "vgpu_quota_violations", "Containers found over their limit past the grace period", labels=["action"]
        )
        for action, count in self.enforcer.actions.items():
            actions.add_metric([action], count)
        yield actions

    def _read_region(self, alloc_id: str) -> region.RegionSample | None:
        path = region.region_path(self.cfg["state_dir"], alloc_id)
        try:
            return region.read(path)
        except region.RegionBusy:
            self.region_errors += 1
            raise
        except (OSError, region.RegionError) as exc:
            self.region_errors += 1
            log.warning("cannot read %s: %s", path, exc)
            raise region.RegionBusy(str(exc)) from exc


class ScrapeStuck(RuntimeError):
    """An earlier scrape still runs past the timeout: answer 503 instead of queueing behind it."""


def _ours(device: str) -> bool:
    try:
        ids.parse_device_id(device)
    except ValueError:
        return False
    return True


DESCRIPTION = (
    "Prometheus exporter of per-GPU and per-container GPU memory, and enforcer of the quotas from the "
    "driver's per-process accounting (config keys: resource_prefix, unit_mib, state_dir and the monitor "
    "section). The node name comes from NODE_NAME."
)


def serve(collector: MonitorCollector, port: int, address: str = "") -> health.HealthServer:
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector)

    def metrics() -> tuple[int, str, bytes]:
        try:
            return 200, prometheus_client.CONTENT_TYPE_LATEST, prometheus_client.generate_latest(registry)
        except ScrapeStuck as exc:
            return 503, "text/plain", f"{exc}\n".encode()

    return health.HealthServer(
        address, port, {"/metrics": metrics, "/healthz": health.check(collector.healthy)}
    ).start()


def main(argv: list[str] | None = None) -> int:
    started = config.start(
        "cgpu-monitor",
        DESCRIPTION,
        __version__,
        argv,
        kubeconfig_help="kubeconfig for the ground-truth enforcement (default: in-cluster config)",
    )
    if started is None:
        return 2
    args, cfg = started
    node = config.node_name()
    backend: nvml.GpuBackend | None = None
    try:
        backend = nvml.NvmlBackend()
    except Exception as exc:
        log.error("NVML unavailable (%s): exporting container metrics only", exc)
    enforcer = None
    if backend is not None:
        pods: kube.PodApi | None = None
        try:
            pods = kube.KubePodApi(kube.api_client(args.kubeconfig), "cgpu-monitor", node)
        except Exception as exc:
            log.error("no Kubernetes API (%s): GPU memory outside quotas is measured but not tied to pods", exc)
        enforcer = Enforcer(cfg, node, backend, pods)
    collector = MonitorCollector(
        cfg, node, backend, PodResourcesClient(cfg["monitor"]["pod_resources_socket"]), enforcer
    )
    if enforcer is not None:
        enforcer.claim_quotas = collector.claim_quotas  # the claims' containers, as /metrics sees them
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if enforcer is not None:
        threading.Thread(target=enforcer.run, args=(stop,), name="ground-truth", daemon=True).start()
    server = serve(collector, cfg["monitor"]["port"])
    log.info("serving /metrics on port %d", server.server_address[1], extra={"gpus": len(collector.gpus)})
    config.wait_for_stop(stop)
    server.stop()
    if backend is not None:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
