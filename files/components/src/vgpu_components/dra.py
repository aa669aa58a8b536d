"""The DRA driver's pure core: the ResourceSlice it publishes, what a claim's allocation gives this
node, and the CDI specification that carries the container contract.

No gRPC, NVML or Kubernetes client here (dra_claims.py, dra_slices.py and dra_services.py apply the
rules), so the rules are easy to test.

The rules:
- The driver is `gpu.<resource_prefix>` (gpu.vgpu.io); its pool on a node is the node's name, one
  ResourceSlice (resource.k8s.io/v1) per node. Each GPU is a device `gpu-<index>` with attributes
  uuid, index and productName, and one capacity, `memory`: what the device plugin would advertise
  ((total - reserved) rounded down to the unit), consumable by many claims at once
  (allowMultipleAllocations, KEP-5075). Its request policy: at least one unit, in steps of a unit,
  and a request that names no memory takes the whole GPU. kube-scheduler rounds every request up
  to the unit and allocates a device only while the claims on it fit its memory.
- A claim's result for one of this pool's devices becomes one container contract (container.py)
  for its consumed memory. Its alloc-id, the name of its host paths, is derived from the claim
  UID, the request, the device and the share ID, so preparing the same claim again finds the same
  folders. A result without consumed capacity (the API server's DRAConsumableCapacity gate off:
  the device is then allocated whole) gets the whole GPU.
- The contract reaches the container as a CDI device `<prefix>/claim=<alloc-id>` (kubelet hands it
  to the runtime), and for runtimes that drop kubelet's CDI devices (containerd 1.6) also under a
  name the pod can compute, `<prefix>/claim=<pod-uid>.<pod's claim name>.<request>` (docs/dra.md).
  Where NVIDIA's CDI specification of the GPU is on the node, its edits come first in the device,
  so the device alone gives the container its GPU too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vgpu_components import ids, names
from vgpu_components.container import Allocation
from vgpu_components.memory_size import MIB, units_for
from vgpu_components.nvml import Gpu
from vgpu_components.quantity import parse_quantity

API_VERSION = "resource.k8s.io/v1"
CAPACITY = "memory"
CDI_VERSION = "0.6.0"
NVIDIA_GPU_KIND = "nvidia.com/gpu"
# A CDI device name (tags.cncf.io/container-device-interface, parser.ValidateDeviceName).
_CDI_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")


class PrepareError(ValueError):
    """A claim this node cannot prepare; the message says what and why (kubelet shows it)."""


def driver_name(cfg: Mapping[str, Any]) -> str:
    return names.dra_driver(cfg["resource_prefix"])


def cdi_kind(cfg: Mapping[str, Any]) -> str:
    return f"{cfg['resource_prefix']}/claim"


def device_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.index}"


def slice_name(node: str, driver: str) -> str:
    """One ResourceSlice per node and driver; a name of at most 253 characters."""
    name = f"{node}-{driver}"
    if len(name) <= 253:
        return name
    return f"{node[:200]}-{hashlib.sha256(name.encode()).hexdigest()[:16]}"


def usable_units(gpu: Gpu, cfg: Mapping[str, Any]) -> int:
    """Units of a GPU that claims may take: the device plugin's rule (memory_size.units_for)."""
    return units_for(gpu.total_mib, cfg["reserved_mib"], cfg["unit_mib"])


def resource_slice(
    node: str, gpus: Sequence[Gpu], cfg: Mapping[str, Any], *, generation: int, node_uid: str = ""
) -> dict[str, Any]:
    """The ResourceSlice of this node: every GPU with memory as consumable capacity."""
    driver = driver_name(cfg)
    unit = f"{cfg['unit_mib']}Mi"
    devices = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        units = usable_units(gpu, cfg)
        if units < 1:
            continue  # reserved_mib leaves nothing of it
        memory = f"{units * cfg['unit_mib']}Mi"
        attributes: dict[str, Any] = {"uuid": {"string": gpu.uuid}, "index": {"int": gpu.index}}
        if gpu.name:
            attributes["productName"] = {"string": gpu.name[:64]}
        devices.append(
            {
                "name": device_name(gpu),
                "attributes": attributes,
                "allowMultipleAllocations": True,
                "capacity": {
                    CAPACITY: {
                        "value": memory,
                        "requestPolicy": {"default": memory, "validRange": {"min": unit, "step": unit}},
                    }
                },
            }
        )
    metadata: dict[str, Any] = {"name": slice_name(node, driver)}
    if node_uid:
        # Deleted with its node by the garbage collector.
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def same_devices(published: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether a published slice already says what `wanted` says (the API server may have
    normalised quantities, so they are compared as numbers)."""

    def normal(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: normal(v) for k, v in value.items()}
        if isinstance(value, list):
            return [normal(v) for v in value]
        if isinstance(value, str):
            try:
                return parse_quantity(value)
            except ValueError:
                return value
        return value

    keys = ("driver", "nodeName", "devices")
    have = published.get("spec") or {}
    want = wanted["spec"]
    return all(normal(have.get(k)) == normal(want.get(k)) for k in keys)


# --- claims ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ClaimDevice:
    """One of a claim's allocated devices that this node prepares."""

    request: str
    pool: str
    device: str
    share_id: str
    gpu: Gpu
    units: int
    alloc_id: str

    def record(self) -> dict[str, Any]:
        return {
            "request": self.request,
            "pool": self.pool,
            "device": self.device,
            "share_id": self.share_id,
            "gpu_uuid": self.gpu.uuid,
            "units": self.units,
            "alloc_id": self.alloc_id,
        }


def dra_alloc_id(claim_uid: str, request: str, device: str, share_id: str) -> str:
    """The alloc-id (16 hex digits, as the device plugin's) of one result of one claim."""
    return ids.alloc_id([f"dra/{claim_uid}/{request}/{device}/{share_id}"])


def claim_devices(
    claim: Mapping[str, Any], node: str, gpus: Sequence[Gpu], cfg: Mapping[str, Any]
) -> list[ClaimDevice]:
    """The results of a ResourceClaim (as the API returns it) for this driver's pool on `node`,
    each with its GPU and quota; PrepareError when the claim cannot be prepared here."""
    meta = claim.get("metadata") or {}
    what = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise PrepareError(f"{what} is not allocated")
    driver = driver_name(cfg)
    by_name = {device_name(g): g for g in gpus}
    unit_mib = int(cfg["unit_mib"])
    out = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        if result.get("driver") != driver or result.get("pool") != node:
            continue
        name = str(result.get("device", ""))
        gpu = by_name.get(name)
        if gpu is None:
            raise PrepareError(f"{what}: device {name!r} is not one of this node's GPUs ({sorted(by_name)})")
        request = str(result.get("request", ""))
        share_id = str(result.get("shareID") or "")
        consumed = (result.get("consumedCapacity") or {}).get(CAPACITY)
        if consumed is None:
            units = usable_units(gpu, cfg)  # allocated whole: no consumable capacity on this cluster
        else:
            try:
                mib = parse_quantity(consumed) / MIB
            except ValueError as exc:
                raise PrepareError(f"{what}: request {request!r}: consumed memory {exc}") from None
            if mib.denominator != 1 or mib < unit_mib or int(mib) % unit_mib:
                raise PrepareError(
                    f"{what}: request {request!r} consumed {consumed} of {name}, not a whole number of "
                    f"{unit_mib} MiB units (the device's request policy rounds up to the unit; was the "
                    "slice published with another unit_mib?)"
                )
            units = int(mib) // unit_mib
        out.append(
            ClaimDevice(
                request=request,
                pool=node,
                device=name,
                share_id=share_id,
                gpu=gpu,
                units=units,
                alloc_id=dra_alloc_id(str(meta.get("uid", "")), request, name, share_id),
            )
        )
    if not out:
        raise PrepareError(f"{what} has no device of driver {driver} on node {node}")
    return out


def pod_claim_names(pod: Mapping[str, Any], claim_name: str) -> list[str]:
    """The names under which a pod refers to the ResourceClaim `claim_name` (spec.resourceClaims)."""
    generated = {
        s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = []
    for ref in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = ref.get("name")
        if ref.get("resourceClaimName") == claim_name or generated.get(name) == claim_name:
            names.append(str(name))
    return names


def claim_consumers(pod: Mapping[str, Any], claim_name: str) -> list[str]:
    """Who in the pod uses the ResourceClaim `claim_name`: each container (init, regular) whose
    resources.claims names it, as namespace/pod/container; the pod itself (namespace/pod) when it
    names the claim and no container does; none when it does not name it."""
    meta = pod.get("metadata") or {}
    pod_name = f"{meta.get('namespace')}/{meta.get('name')}"
    names = set(pod_claim_names(pod, claim_name))
    if not names:
        return []
    spec = pod.get("spec") or {}
    containers = [
        f"{pod_name}/{c.get('name')}"
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        if any(ref.get("name") in names for ref in (c.get("resources") or {}).get("claims") or [])
    ]
    return containers or [pod_name]


def shared_claim_error(namespace: str, name: str, consumers: list[str]) -> str:
    """Why a claim used by more than one container is not prepared (kubelet shows it on the pod)."""
    return (
        f"ResourceClaim {namespace}/{name} is used by {len(consumers)} containers ({', '.join(sorted(consumers))}): "
        "a claim of GPU memory is one container's GPU-memory quota, and containers sharing it would each "
        "be held to all of it; give each container its own claim (a ResourceClaimTemplate in the pod "
        "spec, and one request per container)"
    )


def pod_alias(pod_uid: str, pod_claim: str, request: str) -> str:
    """The CDI device name a pod can compute for one request of one of its claims (containerd 1.6)."""
    alias = f"{pod_uid}.{pod_claim}.{request.split('/', 1)[0]}"
    if not _CDI_NAME.match(alias):
        raise PrepareError(f"cannot name a CDI device {alias!r}: expected letters, digits, '_', '.', ':' and '-'")
    return alias


# --- CDI ---------------------------------------------------------------------------------------
def contract_edits(allocation: Allocation) -> dict[str, Any]:
    """The container contract of one allocation as CDI containerEdits."""
    mounts = [
        {
            "hostPath": host,
            "containerPath": container,
            "options": ["ro" if read_only else "rw", "nosuid", "nodev", "bind"],
        }
        for container, host, read_only in allocation.mounts
    ]
    return {"env": [f"{k}={v}" for k, v in allocation.envs.items()], "mounts": mounts}


def merge_edits(*edits: Mapping[str, Any]) -> dict[str, Any]:
    """Concatenate CDI containerEdits; later env entries of the same name win where applied."""
    merged: dict[str, list[Any]] = {}
    for edit in edits:
        for key, value in edit.items():
            if isinstance(value, list):
                merged.setdefault(key, []).extend(value)
    return {k: v for k, v in merged.items() if v}


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(text).split("."))
    except ValueError:
        return (0,)


@dataclass(frozen=True)
class GpuEdits:
    """NVIDIA's CDI edits of one GPU (spec-level and device-level) and the spec's version."""

    edits: dict[str, Any]
    cdi_version: str


def nvidia_gpu_edits(spec_dirs: Iterable[str | Path]) -> dict[str, GpuEdits]:
    """NVIDIA's CDI edits per GPU UUID or index, from the `nvidia.com/gpu` specifications in these
    folders (written by `nvidia-ctk cdi generate` for the runtime's cdi mode); empty where none is.
    A file that cannot be read or parsed is skipped: it is not ours to judge."""
    found: dict[str, GpuEdits] = {}
    for folder in spec_dirs:
        try:
            paths = sorted(Path(folder).iterdir())
        except OSError:
            continue
        for path in paths:
            if path.suffix not in (".json", ".yaml", ".yml"):
                continue
            try:
                spec = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue
            if not isinstance(spec, dict) or spec.get("kind") != NVIDIA_GPU_KIND:
                continue
            common = spec.get("containerEdits") or {}
            for device in spec.get("devices") or []:
                if isinstance(device, dict) and device.get("name") is not None:
                    edits = merge_edits(common, device.get("containerEdits") or {})
                    found[str(device["name"])] = GpuEdits(edits, str(spec.get("cdiVersion", CDI_VERSION)))
    return found


def cdi_spec(
    kind: str, devices: Sequence[tuple[Sequence[str], Allocation]], gpu_edits: Mapping[str, GpuEdits]
) -> dict[str, Any]:
    """A CDI specification with one device per allocation, under each of its names."""
    version = CDI_VERSION
    out: list[dict[str, Any]] = []
    for device_names, allocation in devices:
        own = contract_edits(allocation)
        gpu = allocation.gpu
        nvidia = gpu_edits.get(gpu.uuid) or gpu_edits.get(str(gpu.index))
        if nvidia is not None:
            own = merge_edits(nvidia.edits, own)
            version = max(version, nvidia.cdi_version, key=_version)
        out.extend({"name": name, "containerEdits": own} for name in device_names)
    return {"cdiVersion": version, "kind": kind, "devices": out}


def cdi_spec_file(cdi_dir: str | Path, kind: str, claim_uid: str) -> Path:
    """Where the specification of one claim goes: a transient spec name, as CDI's helpers make it."""
    vendor, cls = kind.split("/", 1)
    return Path(cdi_dir) / f"{vendor}-{cls}_{claim_uid}.json"


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
