"""The device plugin's host paths: per allocation a region folder and a quota file under state_dir.

    <state_dir>/containers/<alloc-id>/vgpu.region    the file alone mounted read-write at /var/run/vgpu/vgpu.region
    <state_dir>/quotas/<alloc-id>.conf               mounted read-only at /etc/vgpu/quota.conf
    <state_dir>/mps/<alloc-id>.json                  MPS nodes: what its MPS daemon enforces (mps_requests.py)

The rule: the plugin owns both folders and everything it creates in them; a container can write
its region file and nothing else it did not create itself.

- containers/ is 0711 (host users cannot list or reach into it by guessing names, the monitor and
  the mounts still can). A region folder is 0755, owned by the plugin, and never mounted: the
  container gets the region file alone (issue 40: a mounted folder let its root fill the node's
  disk with files), created 0666 at the fixed size libvgpu maps (region.FILE_SIZE) with its blocks
  allocated (posix_fallocate), which libvgpu initialises on first use.
- A region file is host disk any uid of its container can write: at each poll (bound_regions, from
  collect) one found grown past its size is cut back to it in place (the mounted inode), one cut
  short is given its size back, and anything else found in a region folder is deleted; each cut is
  logged and counted (regions_cut). Between two polls a container can write at most what it can
  write to disk in one poll interval.
- A new allocation never deletes in place what a container left: it renames the old folder to
  containers/.retired-<alloc-id>-<n> (a rename inside one folder needs no permission on the folder
  moved, so a subfolder a container locked cannot stop it), then deletes what it can.
- One Allocate call prepares all its containers or none: on a failure it retires what it made.
- Folders and quota files of allocations that kubelet's PodResources no longer lists, for longer
  than a grace period, are retired (collect): their number follows the allocated containers.

What a quota file says is quota_file.py's: this module lays the files out, it does not read them.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from vgpu_components import layout, mps_requests, region
from vgpu_components.mps_requests import MpsRequest

log = logging.getLogger("vgpu.device_plugin")

REGION_FILE = layout.REGION_FILE
RETIRED_PREFIX = ".retired-"
CONTAINERS_MODE = 0o711
FOLDER_MODE = 0o755
REGION_MODE = 0o666
QUOTA_MODE = 0o644
PAGE = 4096
# Disk a region file may hold past its size before the poll gives it back (a filesystem's own
# preallocation and metadata blocks).
REGION_SLACK = 256 * 1024


class Prepared(Protocol):
    """What prepare needs of an allocation (container.Allocation)."""

    alloc_id: str
    quota_text: str
    region_host_dir: Path
    quota_host_file: Path
    mps_request: MpsRequest | None


class HostPaths:
    def __init__(self, state_dir: str | os.PathLike[str], grace_s: float) -> None:
        self.state_dir = Path(state_dir)
        self.containers = layout.containers(state_dir)
        self.quotas = layout.quotas(state_dir)
        self.grace_s = grace_s
        self._unlisted_since: dict[str, float] = {}  # alloc-id -> when collect first missed it
        self._serial = itertools.count()
        self.regions_cut = 0  # region files found grown, cut short or with company, and put right

    # --- Allocate ---------------------------------------------------------------------------
    def prepare(self, allocations: Sequence[Prepared]) -> None:
        """Fresh region folders and quota files for every allocation, or none (OSError)."""
        done: list[Prepared] = []
        try:
            for allocation in allocations:
                self._prepare_one(allocation)
                done.append(allocation)
        except OSError:
            for allocation in done:
                self.retire(allocation.alloc_id)
            raise

    def _prepare_one(self, allocation: Prepared) -> None:
        self._ensure_parents()
        self.retire(allocation.alloc_id)
        self._unlisted_since.pop(allocation.alloc_id, None)
        folder = allocation.region_host_dir
        folder.mkdir(mode=FOLDER_MODE)
        folder.chmod(FOLDER_MODE)  # whatever the umask
        fd = os.open(folder / REGION_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, REGION_MODE)
        try:
            os.fchmod(fd, REGION_MODE)  # every uid in the container shares it, whatever the umask
            os.posix_fallocate(fd, 0, region.FILE_SIZE)  # its fixed size, on disk: libvgpu never grows it
        finally:
            os.close(fd)
        quota = allocation.quota_host_file
        tmp = quota.with_name(f".{quota.name}.tmp")
        tmp.write_text(allocation.quota_text, encoding="utf-8")
        tmp.chmod(QUOTA_MODE)
        tmp.replace(quota)
        if allocation.mps_request is not None:
            mps_requests.write_request(self.state_dir, allocation.mps_request)

    def _ensure_parents(self) -> None:
        self.containers.mkdir(parents=True, exist_ok=True)
        self.containers.chmod(CONTAINERS_MODE)
        self.quotas.mkdir(parents=True, exist_ok=True)

    # --- retiring and collecting --------------------------------------------------------------
    def retire(self, alloc_id: str) -> None:
        """Remove an allocation's folder and quota file; what a container left that cannot be
        deleted now stays in a .retired- folder for the next collect."""
        folder = self.containers / alloc_id
        if folder.exists() or folder.is_symlink():
            retired = self.containers / f"{RETIRED_PREFIX}{alloc_id}-{time.time_ns()}-{next(self._serial)}"
            folder.rename(retired)
            _delete(retired)
        (self.quotas / f"{alloc_id}.conf").unlink(missing_ok=True)
        mps_requests.remove_request(self.state_dir, alloc_id)  # nvidia-mps stops its daemon

    def collect(self, allocated: Iterable[str], now: float | None = None) -> list[str]:
        """Retire allocations PodResources has not listed for grace_s; returns their alloc-ids.

        `allocated` must come from a successful PodResources List: never call this on an error."""
        now = time.monotonic() if now is None else now
        listed = set(allocated)
        on_disk = {p.name for p in _entries(self.containers) if not p.name.startswith(RETIRED_PREFIX)}
        on_disk |= {p.name.removesuffix(".conf") for p in _entries(self.quotas) if p.name.endswith(".conf")}
        on_disk |= {p.stem for p in _entries(mps_requests.requests_dir(self.state_dir)) if p.name.endswith(".json")}
        for alloc_id in list(self._unlisted_since):
            if alloc_id in listed or alloc_id not in on_disk:
                del self._unlisted_since[alloc_id]
        collected = []
        for alloc_id in sorted(on_disk - listed):
            since = self._unlisted_since.setdefault(alloc_id, now)
            if now - since >= self.grace_s:
                self.retire(alloc_id)
                del self._unlisted_since[alloc_id]
                collected.append(alloc_id)
        for retired in _entries(self.containers):
            if retired.name.startswith(RETIRED_PREFIX):
                _delete(retired)
        if collected:
            log.info("collected the host folders of %d ended container(s)", len(collected))
        self.bound_regions()
        return collected

    # --- bounding the region files --------------------------------------------------------------
    def bound_regions(self) -> list[str]:
        """Put every region folder back to its one region file of region.FILE_SIZE bytes; returns
        the alloc-ids of those that needed it (logged, counted in regions_cut)."""
        fixed = []
        for folder in _entries(self.containers):
            if folder.name.startswith(RETIRED_PREFIX) or folder.is_symlink() or not folder.is_dir():
                continue
            what = [f"removed {entry.name!r}" for entry in _entries(folder) if entry.name != REGION_FILE]
            for entry in _entries(folder):
                if entry.name != REGION_FILE:
                    _remove(entry)
            size = _bound_file(folder / REGION_FILE)
            if size is not None:
                what.append(f"cut the region file back from {size} bytes of disk to {region.FILE_SIZE}")
            if what:
                fixed.append(folder.name)
                self.regions_cut += 1
                log.warning(
                    "allocation %s: %s (a container may write its region file, never grow it or add files)",
                    folder.name,
                    "; ".join(what),
                    extra={"alloc_id": folder.name},
                )
        return fixed


def _bound_file(path: Path) -> int | None:
    """Cut a region file back (or up) to region.FILE_SIZE in place, with no disk allocated past
    its end; the disk it took before (the larger of its size and its blocks), or None when it was
    as it should be (or is not a regular file: never followed, libvgpu refuses it too)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # missing, a symlink (ELOOP), a socket: nothing of ours to size
    try:
        info = os.fstat(fd)
        on_disk = info.st_blocks * 512
        if not stat.S_ISREG(info.st_mode) or (
            info.st_size == region.FILE_SIZE and on_disk <= region.FILE_SIZE + REGION_SLACK
        ):
            return None
        if info.st_size <= region.FILE_SIZE:
            # Blocks kept past the end (fallocate's KEEP_SIZE) go only when a truncate shrinks
            # the file: grow it by a page first (a hole, nothing allocated), then cut it.
            os.ftruncate(fd, region.FILE_SIZE + PAGE)
        os.ftruncate(fd, region.FILE_SIZE)
        os.posix_fallocate(fd, 0, region.FILE_SIZE)  # a region cut short gets its blocks back
        return max(info.st_size, on_disk)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            _delete(path)
        else:
            path.unlink()


def _entries(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except FileNotFoundError:
        return []


def _delete(path: Path) -> None:
    """Delete a retired folder. What a container locked (a 0500 subfolder) is unlocked first where
    the plugin may (it owns it, or has CAP_FOWNER); what still resists waits for the next collect."""

    def unlock(_function: Callable[..., Any], failed: str, _exc_info: Any) -> None:
        for target in (failed, os.path.dirname(failed)):
            with contextlib.suppress(OSError):
                if stat.S_ISDIR(os.lstat(target).st_mode):
                    os.chmod(target, stat.S_IRWXU)

    for _attempt in range(3):  # each pass unlocks one more level of nested locked folders
        shutil.rmtree(path, onerror=unlock)
        if not os.path.lexists(path):
            return
    log.warning("cannot delete yet what a container left in %s; retrying at the next collect", path)
