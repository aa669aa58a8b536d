"""Which processes hold the GPU's device files, and which process a PID names now (device_holders.py):
against a folder laid out as /proc (fakes.started), and against real processes of this machine
that hold a descriptor of a stand-in device file (no GPU here: a regular file named like
/dev/nvidia0 stands in for it; the scan matches by path only).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import started
from vgpu_components import device_holders
from vgpu_components.device_holders import Holder


def test_the_scan_finds_each_holder_of_the_device_files_with_its_start_time(tmp_path: Path) -> None:
    started(tmp_path, 100, 5000, holds=["nvidiactl", "nvidia0", "nvidia-uvm"])
    started(tmp_path, 200, 6000)  # holds /dev/null only
    started(tmp_path, 300, 7000, holds=["nvidiactl"])  # an NVML reader
    (tmp_path / "self").symlink_to("100")  # not a PID
    holders, unreadable = device_holders.scan(tmp_path)
    assert holders == [
        Holder(100, 5000, frozenset({"nvidiactl", "nvidia0", "nvidia-uvm"})),
        Holder(300, 7000, frozenset({"nvidiactl"})),
    ]
    assert unreadable == 0


def test_a_process_whose_descriptors_cannot_be_read_is_counted(tmp_path: Path) -> None:
    """As root here nothing is refused, so a file where /proc/<pid>/fd should be a folder stands in
    for a process the monitor may not look into (it lacks CAP_SYS_PTRACE)."""
    started(tmp_path, 100, 5000, holds=["nvidia0"])
    (tmp_path / "400").mkdir()
    (tmp_path / "400" / "fd").write_text("")
    holders, unreadable = device_holders.scan(tmp_path)
    assert [h.pid for h in holders] == [100] and unreadable == 1
    assert device_holders.process(400, tmp_path) == device_holders.Process(None, None)
    assert device_holders.process(100, tmp_path) == device_holders.Process(5000, True)
    assert device_holders.process(999, tmp_path) == device_holders.Process(None, False)  # no such process


def test_the_start_time_survives_a_command_name_with_parentheses(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    fields = ["S", *["0"] * 18, "123456", "0"]  # state, then fields 4 to 21, then 22: the start time
    (tmp_path / "42" / "stat").write_text(f"42 (a) b) {' '.join(fields)}\n")  # the command name is "a) b"
    assert device_holders.start_time(42, tmp_path) == 123456
    assert device_holders.start_time(43, tmp_path) is None


@pytest.fixture
def stand_in_device(tmp_path: Path) -> Iterator[tuple[Path, list[subprocess.Popen[bytes]]]]:
    """A stand-in for /dev/nvidia0 and the real processes started with it; they are stopped after."""
    (tmp_path / "dev").mkdir()
    device = tmp_path / "dev" / "nvidia0"
    device.write_text("")
    children: list[subprocess.Popen[bytes]] = []
    yield device, children
    for child in children:
        child.kill()
        child.wait()


def test_the_scan_finds_real_processes_holding_a_stand_in_device(
    stand_in_device: tuple[Path, list[subprocess.Popen[bytes]]],
) -> None:
    device, children = stand_in_device
    fd = os.open(device, os.O_RDONLY)
    try:
        holder = subprocess.Popen(["sleep", "600"], pass_fds=[fd])
        children.append(holder)
    finally:
        os.close(fd)
    children.append(subprocess.Popen(["sleep", "600"]))  # holds nothing of it
    prefix = str(device.parent / "nvidia")
    holders, _unreadable = device_holders.scan(Path("/proc"), prefix)
    ours = [h for h in holders if h.pid in {c.pid for c in children}]
    start = device_holders.start_time(holder.pid)
    assert ours == [Holder(holder.pid, start, frozenset({"nvidia0"}))] and start is not None
    assert device_holders.process(holder.pid, Path("/proc"), prefix) == device_holders.Process(start, True)
    assert device_holders.process(children[1].pid, Path("/proc"), prefix).holds_gpu is False
