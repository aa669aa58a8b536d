"""Issue 40 item 3: the node's disk through the region folder. The per-container folder and its
`vgpu.region` were writable host disk mounted into the container (host_paths.py): any uid could
grow the region file, root could add files, all outside the pod's ephemeral-storage limit.

Now the container gets the region FILE alone (its folder is not mounted), created at the fixed
size libvgpu's region.c maps (region.FILE_SIZE) with its blocks allocated, and the component that
owns the host paths cuts it back to that size at each poll when it finds it grown. Real files in a
temporary folder; the libvgpu side (it opens the pre-sized file and writes its region) is
test_region_contract.py's, with the real library.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from pathlib import Path

import pytest
from fakes import GPUS
from vgpu_components import config, container, region
from vgpu_components.host_paths import HostPaths

MIB = 1024 * 1024
ALLOC = "0123456789abcdef"


def prepared(tmp_path: Path) -> tuple[HostPaths, container.Allocation]:
    cfg = config.load(None, environ={})
    cfg["state_dir"] = str(tmp_path / "state")
    allocation = container.container_contract(GPUS[0], 10, 100, ALLOC, cfg)
    paths = HostPaths(cfg["state_dir"], grace_s=300)
    paths.prepare([allocation])
    return paths, allocation


def test_the_container_is_given_its_region_file_and_not_the_folder_around_it(tmp_path: Path) -> None:
    """A mounted folder lets a container's root add files to the node's disk; a mounted file only
    lets it write that file."""
    _paths, allocation = prepared(tmp_path)
    region_file = allocation.region_host_dir / "vgpu.region"
    rw = [(inside, host) for inside, host, read_only in allocation.mounts if not read_only]
    assert rw == [("/var/run/vgpu/vgpu.region", str(region_file))]
    assert allocation.envs["VGPU_REGION_DIR"] == "/var/run/vgpu"  # where libvgpu looks for the file
    assert all(host != str(allocation.region_host_dir) for _inside, host, _ro in allocation.mounts)


def test_the_region_file_is_created_at_its_fixed_size_with_its_disk_allocated(tmp_path: Path) -> None:
    _paths, allocation = prepared(tmp_path)
    info = os.stat(allocation.region_host_dir / "vgpu.region")
    assert info.st_size == region.FILE_SIZE == 4096 + 1024 * 1024  # region.h: header + 1024 slots
    assert info.st_blocks * 512 >= region.FILE_SIZE  # allocated: writing it never needs new disk
    assert stat.S_IMODE(info.st_mode) == 0o666
    # Before libvgpu first maps it the monitor sees a region not yet written, not a bad one.
    assert region.read(allocation.region_host_dir / "vgpu.region") is None


def test_a_region_file_grown_by_the_container_is_cut_back_at_the_next_poll(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths, allocation = prepared(tmp_path)
    region_file = allocation.region_host_dir / "vgpu.region"
    inode = os.stat(region_file).st_ino
    with open(region_file, "r+b") as tenant:  # what any uid of the container can do to its region
        tenant.write(b"slots")
        tenant.seek(64 * MIB)
        tenant.write(b"x" * MIB)
    assert os.stat(region_file).st_size > 64 * MIB
    with caplog.at_level(logging.WARNING, logger="vgpu.device_plugin"):
        assert paths.bound_regions() == [ALLOC]
    info = os.stat(region_file)
    assert (info.st_size, info.st_ino) == (region.FILE_SIZE, inode)  # the mounted inode, cut in place
    assert info.st_blocks * 512 < 2 * region.FILE_SIZE
    assert region_file.read_bytes()[:5] == b"slots"  # what libvgpu wrote in its region stays
    assert paths.regions_cut == 1
    assert any(ALLOC in r.getMessage() and "cut the region file back" in r.getMessage() for r in caplog.records)
    assert paths.bound_regions() == [] and paths.regions_cut == 1  # nothing to do: nothing counted


def test_disk_allocated_past_the_end_of_the_region_is_given_back(tmp_path: Path) -> None:
    """fallocate(FALLOC_FL_KEEP_SIZE) takes disk past the end of a file without changing its size
    (any uid that may write the file may do it): the poll looks at the blocks, not only the size."""
    paths, allocation = prepared(tmp_path)
    region_file = allocation.region_host_dir / "vgpu.region"
    keep_size = ctypes.CDLL(None, use_errno=True)
    fd = os.open(region_file, os.O_WRONLY)
    try:
        falloc_fl_keep_size = 0x01
        size = ctypes.c_long(region.FILE_SIZE)
        grow = ctypes.c_long(64 * MIB)
        assert keep_size.fallocate(fd, falloc_fl_keep_size, size, grow) == 0, os.strerror(ctypes.get_errno())
    finally:
        os.close(fd)
    info = os.stat(region_file)
    assert info.st_size == region.FILE_SIZE and info.st_blocks * 512 >= 64 * MIB
    assert paths.bound_regions() == [ALLOC]
    info = os.stat(region_file)
    assert info.st_size == region.FILE_SIZE and info.st_blocks * 512 < 2 * region.FILE_SIZE


def test_the_poll_that_collects_also_bounds_the_regions(tmp_path: Path) -> None:
    """The device plugin polls PodResources and collects; the same poll cuts grown regions back.
    A file someone added in a region folder (a container that had the folder mounted before the
    upgrade) is removed; a region cut short is given its size back."""
    paths, allocation = prepared(tmp_path)
    region_file = allocation.region_host_dir / "vgpu.region"
    os.truncate(region_file, 10 * MIB)
    (allocation.region_host_dir / "dump.bin").write_bytes(b"y" * MIB)
    paths.collect([ALLOC], now=0)
    assert os.stat(region_file).st_size == region.FILE_SIZE
    assert sorted(p.name for p in allocation.region_host_dir.iterdir()) == ["vgpu.region"]
    os.truncate(region_file, 0)
    paths.collect([ALLOC], now=1)
    assert os.stat(region_file).st_size == region.FILE_SIZE


def test_a_region_replaced_by_a_symlink_is_not_followed(tmp_path: Path) -> None:
    paths, allocation = prepared(tmp_path)
    region_file = allocation.region_host_dir / "vgpu.region"
    victim = tmp_path / "victim"
    victim.write_bytes(b"z" * (2 * region.FILE_SIZE))
    region_file.unlink()
    region_file.symlink_to(victim)
    paths.bound_regions()
    assert victim.stat().st_size == 2 * region.FILE_SIZE
