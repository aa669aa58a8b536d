"""nvidia-mps: one MPS control daemon per allocation, with the allocation's share and memory limit
as the daemon's defaults, started from the request the allocating side writes and stopped when the
request goes (mps.py states the protocol).

No GPU or MPS binaries on the CI machine, so nvidia-cuda-mps-control is a stand-in that behaves as
the real tool does where nvidia-mps depends on it: `-f` runs a control daemon in the foreground
that listens on <CUDA_MPS_PIPE_DIRECTORY>/control, a real Unix socket, and answers the control
protocol's text commands (get/set_default_active_thread_percentage,
get/set_default_device_pinned_mem_limit, quit); without arguments it sends the command lines on
stdin to that socket and prints the answers, and fails when no daemon listens there.
tests/gpu/compute_share.sh runs the real daemon on the H200.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import FakeGpus, fake_mps_control, two_gpus
from fakes import mps_ask as ask
from vgpu_components import config, health, mps, mps_requests, mps_supervisor, nvml
from vgpu_components.mps_requests import MpsRequest
from vgpu_components.mps_supervisor import MpsManager

from tests.polling import wait_for

GPU = two_gpus()[0].uuid


@pytest.fixture
def fake_binary(tmp_path: Path) -> str:
    return fake_mps_control(tmp_path)


def make_cfg(root: Path, binary: str) -> dict:
    cfg = config.load(None, environ={})
    cfg["state_dir"] = str(root / "state")
    cfg["mps"].update(
        pipe_dir=str(root / "mps"),
        log_dir=str(root / "mps" / "log"),
        control_binary=binary,
        probe_interval_s=0.2,
        restart_backoff_s=0.2,
    )
    return cfg


class Running:
    """nvidia-mps's manager on its own thread, as the component runs it."""

    def __init__(self, cfg: dict, backend: nvml.GpuBackend | None = None) -> None:
        self.cfg = cfg
        self.manager = MpsManager(cfg, backend)
        self.manager.start()
        self.thread = threading.Thread(target=self.manager.run, daemon=True)
        self.thread.start()

    def request(self, alloc_id: str, percentage: int, pinned_mib: int | None = 3000, gpu: str = GPU) -> MpsRequest:
        """What the device plugin's Allocate does: write the request, wait for its daemon."""
        request = MpsRequest(alloc_id, gpu, percentage, pinned_mib, mps_requests.new_serial())
        mps_requests.write_request(self.cfg["state_dir"], request)
        mps_requests.wait_ready(self.cfg["mps"]["pipe_dir"], request, timeout_s=20)
        return request

    def pipe(self, alloc_id: str) -> Path:
        return mps_requests.pipe_folder(self.cfg["mps"]["pipe_dir"], alloc_id)

    def stop(self) -> None:
        self.manager.stopping.set()
        self.thread.join(10)
        self.manager.stop()


@pytest.fixture
def running(short_tmp: Path, fake_binary: str) -> Iterator[Running]:
    r = Running(make_cfg(short_tmp, fake_binary))
    yield r
    r.stop()


def test_an_allocation_gets_its_own_daemon_with_its_share_and_memory_limit_as_defaults(running: Running) -> None:
    running.request("00000000000000aa", 25, pinned_mib=3000)
    running.request("00000000000000bb", 50, pinned_mib=None)  # a driver without the pinned limit
    one, two = running.pipe("00000000000000aa"), running.pipe("00000000000000bb")
    assert (ask(one, "get_default_active_thread_percentage"), ask(one, "exact_default_device_pinned_mem_limit 0")) == (
        "25.0",
        "3000M",
    )
    assert (ask(two, "get_default_active_thread_percentage"), ask(two, "exact_default_device_pinned_mem_limit 0")) == (
        "50.0",
        "0M",
    )
    log = Path(running.cfg["mps"]["log_dir"]) / "00000000000000aa" / "control.log"
    assert json.loads(log.read_text().splitlines()[-1])["devices"] == GPU  # its GPU only: device 0
    assert (Path(running.cfg["mps"]["pipe_dir"]) / ".ready").exists()
    assert running.manager.healthy() == (True, "ok")


def test_a_daemon_stops_and_its_folders_go_with_its_allocation(running: Running) -> None:
    running.request("00000000000000aa", 25)
    process = running.manager.daemons["00000000000000aa"].process
    assert process is not None
    mps_requests.remove_request(running.cfg["state_dir"], "00000000000000aa")
    wait_for("the daemon to quit", lambda: process.poll() is not None, timeout=20, interval=0.05)
    assert process.returncode == 0  # it was told to quit, not killed
    wait_for("its pipe folder removed", lambda: not running.pipe("00000000000000aa").exists(), timeout=20)


def test_a_crashed_daemon_is_started_again_with_the_same_defaults(running: Running) -> None:
    running.request("00000000000000aa", 25)
    process = running.manager.daemons["00000000000000aa"].process
    assert process is not None
    os.kill(process.pid, signal.SIGKILL)

    def back() -> bool:
        daemon = running.manager.daemons["00000000000000aa"]
        return daemon.process is not None and daemon.process.pid != process.pid and daemon.running()

    wait_for("the daemon started again", back, timeout=20, interval=0.05)
    wait_for(
        "its defaults set again",
        lambda: (
            (running.pipe("00000000000000aa") / ".ready").exists()
            and ask(running.pipe("00000000000000aa"), "get_default_active_thread_percentage") == "25.0"
        ),
        timeout=20,
        interval=0.05,
    )
    assert running.manager.restarts >= 1


def test_a_server_whose_share_or_pinned_limit_a_tenant_raised_is_put_right_and_counted(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 40 item 2: the control socket answers a root container (its pipe folder is mounted
    read-only, which does not stop connect(), and the daemon accepts uid 0). On the H200 one set
    its server's share to 100 % and its pinned limit to 97G. Each probe now reads every running
    server's own share and limit: one that is not the request's is set back, and the server is
    shut down, since the clients it took meanwhile keep what they got; it is logged and counted."""
    running.request("00000000000000aa", 25, pinned_mib=3000)
    pipe = running.pipe("00000000000000aa")
    daemon = running.manager.daemons["00000000000000aa"].process
    share, memory, honest = ask(pipe, "start_server"), ask(pipe, "start_server"), ask(pipe, "start_server")
    assert ask(pipe, f"get_active_thread_percentage {share}") == "25.0"
    # What the root container did, through the socket it can see (one change per server, so that
    # each is seen whichever probe comes between them):
    with caplog.at_level(logging.ERROR, logger="vgpu.mps"):
        ask(pipe, f"set_active_thread_percentage {share} 100")
        ask(pipe, f"set_device_pinned_mem_limit {memory} 0 97G")
        wait_for("both servers put right", lambda: running.manager.tampered >= 2, timeout=20, interval=0.05)
    assert ask(pipe, "get_server_list").split() == [honest]  # the changed ones are shut down
    assert ask(pipe, f"get_active_thread_percentage {honest}") == "25.0"  # the honest one left alone
    assert running.manager.daemons["00000000000000aa"].process is daemon  # the daemon kept running
    messages = {
        pid: [r.getMessage() for r in caplog.records if f"server {pid} " in r.getMessage()] for pid in (share, memory)
    }
    assert "active thread percentage 100, not 25" in messages[share][0], messages
    assert "pinned memory limit 97G, not 3000 MiB" in messages[memory][0], messages
    assert all("00000000000000aa" in m[0] for m in messages.values())
    ok, text = running.manager.healthy()
    assert ok and "2 MPS server setting change(s) put right" in text, text
    # Probed again: nothing more to put right.
    probes = running.manager.probes
    wait_for("two more probes", lambda: running.manager.probes >= probes + 2, timeout=20, interval=0.05)
    assert running.manager.tampered == 2


def test_a_default_pinned_limit_a_tenant_raised_is_put_back(running: Running) -> None:
    """The defaults are what every new server starts with: the probe checks the pinned limit as
    well as the share, and a daemon whose defaults drifted is started again with the request's."""
    running.request("00000000000000aa", 25, pinned_mib=3000)
    pipe = running.pipe("00000000000000aa")
    ask(pipe, "set_default_device_pinned_mem_limit 0 97G")
    wait_for(
        "the default limit put back",
        lambda: (pipe / ".ready").exists() and ask(pipe, "exact_default_device_pinned_mem_limit 0") == "3000M",
        timeout=20,
        interval=0.05,
    )
    assert running.manager.restarts >= 1


@pytest.mark.parametrize(
    ("answer", "limits"),
    [
        ("2G", (2048, 3072)),  # driver 580's answer to 3000M
        ("3000M", (3000, 3001)),
        ("97G", (99328, 100352)),
        ("2.5G", (2560, 2662.4)),
        ("0M", (0, 1)),
        ("set_device_pinned_mem_limit 0 3000M.\n2G", (2048, 3072)),  # the last line is the answer
    ],
)
def test_a_limit_answer_stands_for_every_limit_its_last_digit_covers(answer: str, limits: tuple) -> None:
    assert mps_supervisor.limit_range(answer) == pytest.approx(limits)


@pytest.mark.parametrize("answer", ["", "Invalid PID 7", "2 apples", "G"])
def test_an_answer_that_is_no_limit_is_not_read(answer: str) -> None:
    assert mps_supervisor.limit_range(answer) is None


def test_a_limit_the_daemon_answers_in_whole_gib_is_read_as_what_that_answer_covers(running: Running) -> None:
    """Found on the H200 (driver 580): the daemon answers get_default_device_pinned_mem_limit with
    the limit truncated to whole GiB, 3000M as "2G"; nvidia-mps read that as 2048 MiB, called the
    daemon it had just set up wrong, and restarted it until Allocate gave up (mps-a refused, "not
    ready within 10 s"). "2G" stands for any limit from 2048 MiB up to 3072: 3000 is one of them."""
    running.request("00000000000000aa", 25, pinned_mib=3000)
    pipe = running.pipe("00000000000000aa")
    assert ask(pipe, "get_default_device_pinned_mem_limit 0") == "2G"  # what the real daemon says
    server = ask(pipe, "start_server")
    probes = running.manager.probes
    wait_for("three probes", lambda: running.manager.probes >= probes + 3, timeout=20, interval=0.05)
    assert (running.manager.restarts, running.manager.tampered) == (0, 0)
    assert ask(pipe, "get_server_list").split() == [server]
    assert running.manager.healthy() == (True, "ok")


def test_a_limit_raised_within_what_the_answer_shows_is_set_again_at_each_probe(running: Running) -> None:
    """What a GiB-truncated answer cannot show: root raises its server's limit, or the default,
    from 3000 to 3050 MiB (still "2G"). Each probe sets the request's limit again, on the daemon's
    defaults and on every running server, so a change no answer shows lasts one probe at most."""
    running.request("00000000000000aa", 25, pinned_mib=3000)
    pipe = running.pipe("00000000000000aa")
    server = ask(pipe, "start_server")
    ask(pipe, f"set_device_pinned_mem_limit {server} 0 3050M")
    ask(pipe, "set_default_device_pinned_mem_limit 0 3050M")
    assert ask(pipe, f"get_device_pinned_mem_limit {server} 0") == "2G"
    wait_for(
        "both limits set back to 3000M",
        lambda: (
            (
                ask(pipe, f"exact_device_pinned_mem_limit {server} 0"),
                ask(pipe, "exact_default_device_pinned_mem_limit 0"),
            )
            == ("3000M", "3000M")
        ),
        timeout=20,
        interval=0.05,
    )
    assert ask(pipe, "get_server_list").split() == [server]  # nothing seen changed: the server keeps running
    assert running.manager.restarts == 0


def test_a_daemon_a_tenant_quit_is_started_again_with_its_defaults(running: Running) -> None:
    running.request("00000000000000aa", 25, pinned_mib=3000)
    pipe = running.pipe("00000000000000aa")
    ask(pipe, "quit")

    def back() -> bool:
        try:  # the daemon is being started again: its socket may come and go
            return (
                (pipe / ".ready").exists()
                and ask(pipe, "get_default_active_thread_percentage") == "25.0"
                and ask(pipe, "exact_default_device_pinned_mem_limit 0") == "3000M"
            )
        except OSError:
            return False

    wait_for("the daemon back with its defaults", back, timeout=20, interval=0.05)
    assert running.manager.restarts >= 1


def test_a_request_written_again_restarts_the_daemon_only_for_new_settings(running: Running) -> None:
    first = running.request("00000000000000aa", 100)
    daemon = running.manager.daemons["00000000000000aa"]
    pid = daemon.process.pid if daemon.process else 0
    running.request("00000000000000aa", 100)  # the same units for a new container, same settings
    assert running.manager.daemons["00000000000000aa"].process.pid == pid  # type: ignore[union-attr]
    shared = mps_requests.replace_share(first, 30)  # the container's share, allocated after its memory
    mps_requests.write_request(running.cfg["state_dir"], shared)
    mps_requests.wait_ready(running.cfg["mps"]["pipe_dir"], shared, timeout_s=20)
    assert ask(running.pipe("00000000000000aa"), "get_default_active_thread_percentage") == "30.0"
    assert running.manager.daemons["00000000000000aa"].process.pid != pid  # type: ignore[union-attr]


def test_nvidia_mps_started_again_starts_a_daemon_for_every_allocation(short_tmp: Path, fake_binary: str) -> None:
    """It keeps no state of its own: the requests on the host are the allocations."""
    cfg = make_cfg(short_tmp, fake_binary)
    first = Running(cfg)
    first.request("00000000000000aa", 40)
    first.stop()  # the pod's container ends: its daemons with it
    assert not (Path(cfg["mps"]["pipe_dir"]) / ".ready").exists()
    again = Running(cfg)
    try:
        wait_for(
            "the allocation's daemon back",
            lambda: (
                (again.pipe("00000000000000aa") / "control").exists()
                and ask(again.pipe("00000000000000aa"), "get_default_active_thread_percentage") == "40.0"
            ),
            timeout=20,
            interval=0.05,
        )
    finally:
        again.stop()


def test_a_request_it_cannot_read_is_named_on_healthz(running: Running) -> None:
    folder = mps_requests.requests_dir(running.cfg["state_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "00000000000000cc.json").write_text(json.dumps({"version": 1, "alloc_id": "00000000000000cc"}))
    wait_for("the bad request reported", lambda: not running.manager.healthy()[0], timeout=20, interval=0.05)
    assert "00000000000000cc.json: gpu None is not a GPU UUID" in running.manager.healthy()[1]
    server = health.HealthServer("127.0.0.1", 0, {"/healthz": health.check(running.manager.healthy)}).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.server_address[1]}/healthz", timeout=5)
        assert err.value.code == 503
    finally:
        server.stop()
    (folder / "00000000000000cc.json").unlink()
    wait_for("healthy again", lambda: running.manager.healthy()[0], timeout=20, interval=0.05)


def test_waiting_for_a_daemon_nobody_starts_says_so(short_tmp: Path) -> None:
    request = MpsRequest("00000000000000aa", GPU, 25, 3000, mps_requests.new_serial())
    with pytest.raises(
        mps_requests.MpsNotReady, match=r"was not ready within 0\.2 s: is nvidia-mps running on this node"
    ):
        mps_requests.wait_ready(short_tmp, request, timeout_s=0.2)


def test_gpus_must_stay_in_default_compute_mode(short_tmp: Path, fake_binary: str) -> None:
    gpus = FakeGpus(two_gpus())
    gpus.modes[two_gpus()[1].uuid] = nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS
    r = Running(make_cfg(short_tmp, fake_binary), gpus)
    try:
        ok, why = r.manager.healthy()
        assert not ok and f"nvidia-smi -i {two_gpus()[1].uuid} -c DEFAULT" in why
        assert set(gpus.modes.values()) == {0, 3}  # nothing changed
    finally:
        r.stop()


def test_exclusive_process_cannot_be_asked_for() -> None:
    refused = r"mps\.set_exclusive_process: True must be false: every GPU allocation has its own MPS server"
    with pytest.raises(config.ConfigError, match=refused):
        config.validate(config.load(None, environ={"VGPU_MPS_SET_EXCLUSIVE_PROCESS": "true"}))


def test_sigterm_stops_the_cli_and_its_daemons(short_tmp: Path, fake_binary: str) -> None:
    """The real entry point as a process: SIGTERM -> quit to every daemon -> exit 0."""
    cfg = make_cfg(short_tmp, fake_binary)
    request = MpsRequest("00000000000000aa", GPU, 25, None, mps_requests.new_serial())
    mps_requests.write_request(cfg["state_dir"], request)
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(Path(mps.__file__).resolve().parents[1]),
        VGPU_STATE_DIR=cfg["state_dir"],
        VGPU_MPS_PIPE_DIR=cfg["mps"]["pipe_dir"],
        VGPU_MPS_LOG_DIR=cfg["mps"]["log_dir"],
        VGPU_MPS_CONTROL_BINARY=fake_binary,
        VGPU_MPS_HEALTHZ_PORT="0",
        VGPU_LOG_FORMAT="json",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpu_components.mps", "--config", str(short_tmp / "none.yaml")],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        mps_requests.wait_ready(cfg["mps"]["pipe_dir"], request, timeout_s=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, err.decode()
    assert not (mps_requests.pipe_folder(cfg["mps"]["pipe_dir"], "00000000000000aa") / "control").exists()  # it quit
    assert mps_requests.read_request(cfg["state_dir"], "00000000000000aa") == request  # kept for the next start
