"""The host layout of an allocation under state_dir (docs/architecture.md, "Contract: container env
and mounts"), built here only: the device plugin and the DRA driver make it (host_paths.py, from the
container contract, container.py), cgpu-monitor reads it (quota_file.py, region.py), nvidia-mps
reads its requests (mps_supervisor.py).

    <state_dir>/containers/<alloc-id>/vgpu.region    the region, mounted read-write at /var/run/vgpu
    <state_dir>/quotas/<alloc-id>.conf               the quota file, read-only at /etc/vgpu/quota.conf
    <state_dir>/mps/<alloc-id>.json                  MPS nodes: what its MPS daemon enforces
"""

from __future__ import annotations

import os
from pathlib import Path

CONTAINERS = "containers"
QUOTAS = "quotas"
MPS_REQUESTS = "mps"
REGION_FILE = "vgpu.region"


def containers(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / CONTAINERS


def quotas(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / QUOTAS


def mps_requests(state_dir: str | os.PathLike[str]) -> Path:
    return Path(state_dir) / MPS_REQUESTS


def region_folder(state_dir: str | os.PathLike[str], alloc_id: str) -> Path:
    return containers(state_dir) / alloc_id


def region_file(state_dir: str | os.PathLike[str], alloc_id: str) -> Path:
    return region_folder(state_dir, alloc_id) / REGION_FILE


def quota_path(state_dir: str | os.PathLike[str], alloc_id: str) -> Path:
    return quotas(state_dir) / f"{alloc_id}.conf"


def mps_request_path(state_dir: str | os.PathLike[str], alloc_id: str) -> Path:
    return mps_requests(state_dir) / f"{alloc_id}.json"
