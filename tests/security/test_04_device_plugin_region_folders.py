"""Finding 4: the device plugin's region folders.

- A container left a 0500 subfolder in its region folder; the next Allocate of the same units
  then failed in rmtree with EACCES (INVALID_ARGUMENT), so later pods on that slice were refused.
- Region folders were 0777, unbounded and never collected.
- A refused multi-container Allocate left folders behind.

The plugin runs here in-process against a real gRPC kubelet peer, and, where the finding needs a
plugin without root's permission override, its Allocate handler runs in a child process with an
unprivileged uid (the CI machine runs as root). NVML is the component tests' fake (no GPU here).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from fakes import PluginNode, allocate, make_config, two_gpus
from vgpu_components import ids, protos
from vgpu_components.plugin import DevicePlugin
from vgpu_components.plugin_services import DevicePluginService

from tests.polling import wait_for

KEY0 = ids.gpu_key(two_gpus()[0].uuid)
KEY1 = ids.gpu_key(two_gpus()[1].uuid)
PLUGIN_UID = 65534  # nobody: a plugin without CAP_DAC_OVERRIDE
CONTAINER_UID = 1000  # the workload's user


def units(key: str, first: int, count: int) -> list[str]:
    return [f"{key}-{n}" for n in range(first, first + count)]


# The child's program: import the function's module and the gRPC stubs (loaded lazily) as root, as
# the interpreter's own files may be readable by root only, then take uid's credentials, run the
# function and print its answer.
_CHILD = """
import importlib, json, os, sys
from vgpu_components import protos
uid, module, name, args = json.loads(sys.argv[1])
work = getattr(importlib.import_module(module), name)
protos.deviceplugin()
try:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    answer = work(*args)
except BaseException as exc:
    answer = f"{type(exc).__name__}: {exc}"
sys.stdout.write(answer)
"""


def as_user(uid: int, work: Callable[..., str], *args: Any) -> str:
    """work(*args), a module-level function, in a fresh interpreter with uid's credentials and no
    capabilities; returns its answer (or the exception it raised, as text).

    A fresh interpreter, not a fork: this process runs gRPC servers' threads, and a forked child
    crashed in gRPC's inherited state before it could answer (CI, 2026-12-01)."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps([uid, work.__module__, work.__name__, list(args)])],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"the child as uid {uid} failed: {done.stderr}"
    return done.stdout


class AbortContext:
    """The part of a gRPC servicer context Allocate uses: abort() ends the call."""

    def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"{code.name}: {details}")


def allocate_handler(cfg: dict[str, Any], *containers: list[str]) -> str:
    """The plugin's own Allocate handler on one request; "" when it succeeded, else the refusal."""
    msgs = protos.deviceplugin()[0]
    service = DevicePluginService(DevicePlugin(cfg, two_gpus(), "node-a"))
    request = msgs.AllocateRequest(
        container_requests=[msgs.ContainerAllocateRequest(devices_ids=c) for c in containers]
    )
    service.Allocate(request, AbortContext())
    return ""


@pytest.fixture
def unprivileged_state(short_tmp: Path) -> dict[str, Any]:
    """A config whose state folder belongs to the unprivileged plugin user."""
    # A first Allocate as root elsewhere loads every module the handler needs: the child cannot
    # import more once it has dropped root (the interpreter's folder is not readable to it).
    allocate_handler(make_config(short_tmp / "warm-up"), units(KEY0, 0, 1))
    cfg = make_config(short_tmp)
    state = Path(cfg["state_dir"])
    state.mkdir()
    os.chown(state, PLUGIN_UID, PLUGIN_UID)
    short_tmp.chmod(0o755)
    return cfg


def test_a_locked_subfolder_left_by_a_container_does_not_refuse_the_next_allocate(
    unprivileged_state: dict[str, Any],
) -> None:
    cfg = unprivileged_state
    slice_ = units(KEY0, 0, 30)
    assert as_user(PLUGIN_UID, allocate_handler, cfg, slice_) == ""
    folder = Path(cfg["state_dir"]) / "containers" / ids.alloc_id(slice_)
    # The container (its own uid) leaves a folder it locked, with a file in it.
    junk = folder / "junk"
    junk.mkdir()
    (junk / "file").write_text("left behind")
    os.chown(junk / "file", CONTAINER_UID, CONTAINER_UID)
    os.chown(junk, CONTAINER_UID, CONTAINER_UID)
    junk.chmod(0o500)
    # The next pod on the same units.
    assert as_user(PLUGIN_UID, allocate_handler, cfg, slice_) == ""
    assert folder.is_dir() and not junk.exists(), "the new container got the old container's leftovers"


def write_region_and_plant_a_folder(folder: str) -> str:
    """The workload's side: it writes its region (libvgpu maps the existing file) and must not be
    able to create anything in the folder."""
    with open(Path(folder) / "vgpu.region", "r+b") as region:
        region.write(b"\0")
    try:
        (Path(folder) / "planted").mkdir()
    except PermissionError:
        return "ok"
    return "the workload could create a folder in its region folder"


def test_region_folders_are_not_world_writable_and_a_non_root_workload_still_uses_its_region(
    node: PluginNode,
) -> None:
    slice_ = units(KEY0, 0, 30)
    node.pod_resources.holders = [("ns", "running", "main", "vgpu.io/gpu-memory", slice_)]  # not collected
    allocate(node, slice_)
    node.root.chmod(0o755)  # the test's own temporary folder; on a node the mount skips the path
    state = Path(node.cfg["state_dir"])
    folder = state / "containers" / ids.alloc_id(slice_)
    for path in (state / "containers", folder):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert not mode & stat.S_IWOTH, f"{path} is writable by every user (mode {mode:04o})"

    assert as_user(CONTAINER_UID, write_region_and_plant_a_folder, str(folder)) == "ok"


@pytest.fixture
def node(short_tmp: Path) -> Iterator[PluginNode]:
    n = PluginNode(short_tmp, pod_resources_poll_s=0.1, region_gc_grace_s=0.5)
    yield n
    n.stop()


def test_folders_no_longer_allocated_are_collected_so_their_number_stays_bounded(node: PluginNode) -> None:
    state = Path(node.cfg["state_dir"])
    kept = units(KEY0, 0, 30)
    node.pod_resources.holders = [("ns", "running", "main", "vgpu.io/gpu-memory", kept)]
    allocate(node, kept)
    gone = [units(KEY1, 2 * i, 2) for i in range(40)]  # 40 containers that came and went
    for slice_ in gone:
        allocate(node, slice_)
    # A folder from before this plugin started (a restart) is collected too.
    stale = state / "containers" / ids.alloc_id(units(KEY1, 100, 1))
    stale.mkdir()

    def only_the_running_one() -> bool:
        return sorted(os.listdir(state / "containers")) == [ids.alloc_id(kept)] and sorted(
            os.listdir(state / "quotas")
        ) == [f"{ids.alloc_id(kept)}.conf"]

    wait_for(
        "the folders of ended containers to be collected",
        only_the_running_one,
        10,
        0.05,
        seen=lambda: sorted(os.listdir(state / "containers")),
    )


def test_nothing_is_collected_while_pod_resources_cannot_say_what_is_allocated(
    node: PluginNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = Path(node.cfg["state_dir"])
    slice_ = units(KEY0, 0, 30)
    allocate(node, slice_)
    holders = node.plugin.publisher.holders
    polls: list[float] = []  # when each poll of the holders ended
    real_poll = holders.poll

    def counted_poll() -> Any:
        try:
            return real_poll()
        finally:
            polls.append(time.monotonic())

    monkeypatch.setattr(holders, "poll", counted_poll)
    node.pod_resources.stop()  # kubelet's PodResources API unreachable
    stopped = time.monotonic()
    past_grace = stopped + 3 * holders.host_paths.grace_s
    # Progress, not a fixed sleep: polls must have run well past the grace period.
    wait_for(
        "two polls of the holders later than three grace periods after PodResources went away",
        lambda: sum(t > past_grace for t in polls) >= 2,
        60,
        0.05,
        seen=lambda: [round(t - stopped, 2) for t in polls[-5:]],
    )
    assert (state / "containers" / ids.alloc_id(slice_)).is_dir()
    assert (state / "quotas" / f"{ids.alloc_id(slice_)}.conf").is_file()


def listed(folder: Path) -> list[str]:
    """The region folders in `folder` (retired ones, which only wait for deletion, left out)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


@pytest.mark.parametrize("second", ["invalid units", "unwritable quota file"])
def test_a_refused_multi_container_allocate_leaves_nothing_behind(node: PluginNode, second: str) -> None:
    state = Path(node.cfg["state_dir"])
    first = units(KEY0, 0, 10)
    other = units(KEY0, 10, 10)
    if second == "invalid units":
        other = [f"{KEY0}-10", f"{KEY1}-10"]  # units of two GPUs for one container
    else:
        (state / "quotas" / f"{ids.alloc_id(other)}.conf").mkdir(parents=True)
    before = listed(state / "containers")
    msgs = node.kubelet.msgs
    request = msgs.AllocateRequest(
        container_requests=[
            msgs.ContainerAllocateRequest(devices_ids=first),
            msgs.ContainerAllocateRequest(devices_ids=other),
        ]
    )
    with pytest.raises(grpc.RpcError) as err:
        node.kubelet.stub.Allocate(request, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after = listed(state / "containers")
    assert after == before, f"a refused Allocate left region folders: {after}"
    assert not (state / "quotas" / f"{ids.alloc_id(first)}.conf").exists()
