"""The container contract (docs/architecture.md, "Contract: container env and mounts"): what one
container gets for its units of one GPU, its env, its mounts and the content of its quota file. The
one implementation, for the device plugin's Allocate and the DRA driver's prepare alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vgpu_components import contract, ids, layout, switches
from vgpu_components.allocator import AllocationError, DeviceTable
from vgpu_components.mps_contract import MpsContract
from vgpu_components.mps_requests import MpsRequest, new_serial, pipe_folder
from vgpu_components.nvml import Gpu

# The NVIDIA runtime's device list as mounts (its accept-nvidia-visible-devices-as-volume-mounts):
# /dev/null mounted at <root>/<GPU UUID> gives a container that GPU. roles/nvidia_container_runtime
# makes it the only way an unprivileged container gets one (a pod can make a /dev/null mount only
# with a hostPath volume); NVIDIA_VISIBLE_DEVICES repeats the GPU for tools and for runtimes not
# configured so.
DEVICE_LIST_ROOT = contract.DEVICE_LIST_ROOT


@dataclass
class Allocation:
    """What one container gets: env, mounts (container path, host path, read-only) and its files."""

    alloc_id: str
    gpu: Gpu
    units: int
    limit_mib: int
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[tuple[str, str, bool]] = field(default_factory=list)
    quota_text: str = ""
    region_host_dir: Path = Path()
    quota_host_file: Path = Path()
    mps_request: MpsRequest | None = None  # what its MPS daemon enforces (MPS nodes)


def build_allocation(
    table: DeviceTable,
    device_ids: Sequence[str],
    cfg: Mapping[str, Any],
    mps: MpsContract | None = None,
    share: int | None = None,
) -> Allocation:
    """The container contract of docs/architecture.md for one container's device IDs; `mps` when
    MPS is on for the node, `share` the container's compute share when already allocated."""
    slot = table.resolve(device_ids)
    if not slot.healthy:
        raise AllocationError(f"GPU {slot.gpu.uuid} is unhealthy: {slot.unhealthy_reason or 'unknown reason'}")
    aid = ids.alloc_id(device_ids)
    return container_contract(slot.gpu, len(device_ids), table.unit_mib, aid, cfg, mps=mps, share=share)


def container_contract(
    gpu: Gpu,
    units: int,
    unit_mib: int,
    aid: str,
    cfg: Mapping[str, Any],
    *,
    mps: MpsContract | None = None,
    share: int | None = None,
) -> Allocation:
    """The container contract of docs/architecture.md: `units` units of `unit_mib` MiB of `gpu`,
    under the host paths of allocation `aid`, with `mps` when MPS is on for the node (and `share`,
    the container's compute share in percent, where it has one). The one implementation, for the
    device plugin's Allocate and the DRA driver's NodePrepareResources alike; its interposer
    switches are the device_plugin section's."""
    limit_mib = units * unit_mib
    plugin = cfg["device_plugin"]
    state_dir = Path(cfg["state_dir"])
    install_prefix = cfg["install_prefix"]
    values = plugin["switches"]
    envs = {
        "NVIDIA_VISIBLE_DEVICES": gpu.uuid,
        "CUDA_VISIBLE_DEVICES": "0",
        "VGPU_MEMORY_LIMIT": f"{limit_mib}MiB",
        "VGPU_CONFIG_FILE": contract.CONTAINER_QUOTA_FILE,
        "VGPU_REGION_DIR": contract.CONTAINER_REGION_DIR,
        "LD_LIBRARY_PATH": install_prefix,
        # Preloaded as well: a program that dlopens the real driver by its path (as `ldconfig -p`
        # lists it) still gets libvgpu's hooks through its dlsym (issue 24).
        "LD_PRELOAD": f"{install_prefix.rstrip('/')}/libvgpu.so",
    }
    for switch in switches.SWITCHES:
        envs[switch.env] = str(int(values[switch.key]))
    region_dir = layout.region_folder(state_dir, aid)
    quota_file = layout.quota_path(state_dir, aid)
    mounts = [
        (install_prefix, install_prefix, True),
        # The region file alone, never its folder (issue 40): a container writes its region and
        # cannot add files to the node's disk (host_paths.py bounds the file's size).
        (f"{contract.CONTAINER_REGION_DIR}/{layout.REGION_FILE}", str(region_dir / layout.REGION_FILE), False),
        (contract.CONTAINER_QUOTA_FILE, str(quota_file), True),
        (f"{DEVICE_LIST_ROOT}/{gpu.uuid}", "/dev/null", True),
    ]
    mps_request = None
    if mps is not None:
        # The allocation's own daemon (mps_requests.py) holds its share and its pinned limit (the quota, the
        # driver's own limit under libvgpu's) as the defaults of every server it starts: no variable
        # the container sets raises them. Its pipe folder alone, read-only (a client only connects
        # to the daemon's sockets: tests/gpu/mps_readonly_pipe.sh, on the H200), at mps.pipe_dir.
        envs["CUDA_MPS_PIPE_DIRECTORY"] = mps.pipe_dir
        mounts.append((mps.pipe_dir, str(pipe_folder(mps.pipe_dir, aid)), True))
        percentage = share if share is not None else mps.thread_percentage
        pinned = limit_mib if mps.pinned_limit else None
        mps_request = MpsRequest(aid, gpu.uuid, percentage, pinned, new_serial())
    lines = [
        f"# vgpu quota for allocation {aid} on GPU {gpu.uuid}",
        f"memory_limit=0:{limit_mib}MiB",
        *(f"{switch.key}={int(values[switch.key])}" for switch in switches.SWITCHES),
    ]
    return Allocation(
        alloc_id=aid,
        gpu=gpu,
        units=units,
        limit_mib=limit_mib,
        envs=envs,
        mounts=mounts,
        quota_text="\n".join(lines) + "\n",
        region_host_dir=region_dir,
        quota_host_file=quota_file,
        mps_request=mps_request,
    )
