"""cgpu-monitor: Prometheus exporter of GPU memory per GPU and per container on one node.

Per GPU (NVML): total and used memory. Per container holding <prefix>/gpu-memory units, or a
device of the DRA driver through a claim (both from kubelet's PodResources API): quota, used,
context and peak. The quota is the one in the allocation's quota file, which the device plugin or
the DRA driver wrote for it (quota_file.read_quota_bytes reads it as libvgpu does): one quota per
container, on both scheduling paths, for the metrics and the enforcement alike. Used, context and
peak come from the interposer's region file, found by the alloc-id rule of docs/architecture.md
(for a claim: the alloc-id in the name of the CDI device the driver prepared). Containers that
have not touched the GPU yet export zeros.
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
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import prometheus_client
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from vgpu_components import dra, health, ids, names, nvml, quota_file, region
from vgpu_components.attribution import Unattributed
from vgpu_components.enforcement import Enforcer
from vgpu_components.ground_truth import HostProcess
from vgpu_components.memory_size import MIB
from vgpu_components.nvml import Gpu
from vgpu_components.owners import Quotas
from vgpu_components.podresources import ContainerClaimDevice, PodResourcesClient

log = logging.getLogger("vgpu.monitor")
GPU_LABELS = ["gpu", "UUID", "modelName", "Hostname"]
CONTAINER_LABELS = ["namespace", "pod", "container", "gpu", "UUID", "Hostname"]
HOST_PROCESS_LABELS = ["pid", "command", "gpu", "UUID", "Hostname"]


@dataclass(frozen=True)
class Holder:
    """A container with a GPU-memory quota on this node, through either scheduling path."""

    namespace: str
    pod: str
    container: str
    gpu: Gpu | None  # None: its devices span GPUs, or the GPU is unknown here
    quota_bytes: int | None  # from its quota file; None: the file is missing or not what libvgpu reads
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
        self.resource = names.resource(cfg["resource_prefix"], "memory")
        self.dra_driver = dra.driver_name(cfg)
        self.claim_prefix = f"{dra.cdi_kind(cfg)}="
        self.gpus: list[Gpu] = backend.gpus() if backend is not None else []
        self.by_key = {ids.gpu_key(g.uuid): g for g in self.gpus}
        self.region_errors = 0
        self.quota_file_errors = 0
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
            errors.add_metric(["quota_file"], self.quota_file_errors)
            errors.add_metric(["pod_resources"], self.pod_resources_errors)
            if self.enforcer is not None:  # processes whose /proc/<pid>/fd a scan could not read
                errors.add_metric(["proc_fd"], self.enforcer.unreadable_processes)
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
        counted: set[str] = set()  # an allocation several containers share is handed out once
        for holder in self._holders():
            gpu = holder.gpu
            gpu_index, uuid = (str(gpu.index), gpu.uuid) if gpu else ("", "")
            labels = [holder.namespace, holder.pod, holder.container, gpu_index, uuid, self.node]
            if holder.quota_bytes is not None:
                if holder.alloc_id not in counted:
                    allocated[uuid] = allocated.get(uuid, 0) + holder.quota_bytes
                    counted.add(holder.alloc_id)
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
        """The containers with a quota on either path; [] when kubelet fails (said on /healthz)."""
        if self.pod_resources is None:
            return []
        try:
            return self.holders()
        except Exception as exc:
            log.warning("PodResources List failed: %s", exc)
            return []

    def holders(self) -> list[Holder]:
        """The containers with a quota on either path, from one PodResources List (raises when
        kubelet cannot be asked), each with the quota of its allocation's quota file."""
        if self.pod_resources is None:
            raise RuntimeError("no PodResources client")
        try:
            devices, claims = self.pod_resources.list_both(self.resource, self.dra_driver)
            self.last_ok = True
        except Exception:
            self.pod_resources_errors += 1
            self.last_ok = False
            raise
        out = []
        for held in devices:
            keys = {ids.parse_device_id(d)[0] for d in held.device_ids if _ours(d)}
            gpu = self.by_key.get(min(keys)) if len(keys) == 1 else None
            alloc_id = ids.alloc_id(held.device_ids)
            out.append(Holder(held.namespace, held.pod, held.container, gpu, self._quota(alloc_id), alloc_id))
        return out + self._claim_holders(claims)

    def _claim_holders(self, claims: Iterable[ContainerClaimDevice]) -> list[Holder]:
        """The containers of these DRA claim devices of our driver, with their quotas."""
        by_device = {dra.device_name(g): g for g in self.gpus}
        out = []
        for claim in claims:
            # The driver names the CDI device of an allocation <kind>=<alloc-id> (dra_claims.py); its
            # other names are aliases for runtimes that take CDI names from the pod.
            for name in claim.cdi_devices:
                alloc_id = name.removeprefix(self.claim_prefix)
                if name.startswith(self.claim_prefix) and ids.is_alloc_id(alloc_id):
                    gpu = by_device.get(claim.device)
                    out.append(
                        Holder(claim.namespace, claim.pod, claim.container, gpu, self._quota(alloc_id), alloc_id)
                    )
        return out

    def _quota(self, alloc_id: str) -> int | None:
        """An allocation's quota in bytes from its quota file; None (counted, logged) when unreadable."""
        try:
            quota = quota_file.read_quota_bytes(self.cfg["state_dir"], alloc_id)
        except quota_file.QuotaFileError as exc:
            self.quota_file_errors += 1
            log.warning("%s", exc)
            return None
        if quota is None:
            self.quota_file_errors += 1
            log.warning("allocation %s has no quota file, or one that sets no quota on its GPU", alloc_id)
        return quota

    def quotas(self) -> Quotas:
        """(namespace, pod, container) -> quota in bytes of every container kubelet lists with our
        GPU memory (the sum of its allocations; None when one's quota file cannot be read), for
        the enforcer, with the allocations each is made of: containers that share one are held to
        its one quota together. Raises when kubelet cannot be asked."""
        quotas = Quotas()
        for holder in self.holders():
            key = (holder.namespace, holder.pod, holder.container)
            before = quotas.get(key, 0)
            quotas[key] = None if before is None or holder.quota_bytes is None else before + holder.quota_bytes
            quotas.allocations[key] = quotas.allocations.get(key, frozenset()) | {holder.alloc_id}
            quotas.allocation_quotas[holder.alloc_id] = holder.quota_bytes
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
            "limit": ("vgpu_container_memory_limit_bytes", "Quota plus the context allowance of the container"),
            "over": ("vgpu_container_over_quota_seconds", "Time over its limit, accumulated, paid back slowly"),
        }
        families = {k: GaugeMetricFamily(n, h, labels=CONTAINER_LABELS) for k, (n, h) in names.items()}
        host = {
            "real": GaugeMetricFamily(
                "vgpu_host_process_memory_bytes",
                "GPU memory of a process in no pod on this node (NVML): no quota, and it cannot be evicted",
                labels=HOST_PROCESS_LABELS,
            ),
            "over": GaugeMetricFamily(
                "vgpu_host_process_over_quota_seconds",
                "How long a process in no pod on this node has held GPU memory",
                labels=HOST_PROCESS_LABELS,
            ),
        }
        index = {g.uuid: str(g.index) for g in self.gpus}
        for usage in seen.usages:
            who = usage.who
            uuids = sorted(usage.gpus)
            gpus = ",".join(index.get(u, "") for u in uuids)
            if isinstance(who, HostProcess):
                labels = [str(who.pid), who.command, gpus, ",".join(uuids), self.node]
                host["real"].add_metric(labels, usage.used_bytes)
                host["over"].add_metric(labels, seen.over_seconds.get(who, 0.0))
                continue
            labels = [who.namespace, who.pod, who.container, gpus, ",".join(uuids), self.node]
            families["real"].add_metric(labels, usage.used_bytes)
            families["limit"].add_metric(labels, seen.limits.get(who, 0))
            families["over"].add_metric(labels, seen.over_seconds.get(who, 0.0))
        yield from families.values()
        yield from host.values()
        yield self._unattributed_metric(seen.unattributed)
        system = GaugeMetricFamily(
            "vgpu_gpu_memory_system_bytes",
            "GPU memory of the known system processes (owners.SYSTEM_PROCESSES: the MPS servers)",
            labels=GPU_LABELS,
        )
        for gpu in self.gpus:
            system.add_metric([str(gpu.index), gpu.uuid, gpu.name, self.node], seen.system.get(gpu.uuid, 0))
        yield system
        actions = CounterMetricFamily(
            "vgpu_quota_violations",
            "Violations past the grace period, by what was done: evicted, forced (deleted at once), reported, "
            "unevictable (a process in no pod)",
            labels=["action"],
        )
        for action, count in self.enforcer.actions.items():
            actions.add_metric([action], count)
        yield actions

    def _unattributed_metric(self, unattributed: Mapping[str, Unattributed]) -> GaugeMetricFamily:
        """Per GPU, the memory the enforcer's last check could charge no container with."""
        family = GaugeMetricFamily(
            "vgpu_gpu_memory_unattributed_bytes",
            "GPU memory no container could be charged with: used beyond every process's NVML entry, and entries "
            "of exited or reused PIDs whose holders are no container's (or several)",
            labels=GPU_LABELS,
        )
        for gpu in self.gpus:
            gap = unattributed.get(gpu.uuid)
            family.add_metric([str(gpu.index), gpu.uuid, gpu.name, self.node], gap.bytes if gap else 0)
        return family

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


def serve(collector: MonitorCollector, port: int, address: str = "") -> health.HealthServer:
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector)

    def metrics() -> tuple[int, str, bytes]:
        try:
            return 200, prometheus_client.CONTENT_TYPE_LATEST, prometheus_client.generate_latest(registry)
        except ScrapeStuck as exc:
            return 503, "text/plain", f"{exc}\n".encode()

    return health.HealthServer(address, port, {"/metrics": metrics, "/healthz": health.check(collector.healthy)})
