"""The one main() of the five components (component.py): command line, config, logs, signals and
exit codes, each component passing only its body."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tomllib
from vgpu_components import component, config, contract

SRC = Path(component.__file__).resolve().parents[1]
DEMO = component.Component("demo-agent", "a component for the tests", kubeconfig_help="kubeconfig (tests)")


def run(body: component.Body, *argv: str, environ: dict[str, str] | None = None) -> int:
    return component.main(DEMO, body, [*argv], environ=environ or {})


def test_a_bad_config_value_is_named_on_stderr_with_exit_status_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("unit_mib: -3\n")
    ran: list[component.Started] = []

    def body(started: component.Started) -> int:
        ran.append(started)
        return 0

    assert run(body, "--config", str(bad)) == component.EXIT_BAD_CONFIG == 2
    assert not ran, "the body ran with a bad configuration"
    err = capsys.readouterr().err
    assert err.startswith("demo-agent: bad configuration: unit_mib:") and "-3" in err


def test_a_bad_environment_override_names_the_variable_and_its_value(tmp_path: Path, capsys) -> None:
    assert run(lambda started: 0, "--config", str(tmp_path / "none.yaml"), environ={"VGPU_UNIT_MIB": "lots"}) == 2
    assert "demo-agent: bad configuration: VGPU_UNIT_MIB: expected an integer, got 'lots'" in capsys.readouterr().err


def test_a_config_error_the_body_finds_is_reported_the_same_way(tmp_path: Path, capsys) -> None:
    def body(started: component.Started) -> int:
        raise config.ConfigError("extender.address 'nowhere': not an address")

    assert run(body, "--config", str(tmp_path / "none.yaml")) == 2
    assert "demo-agent: bad configuration: extender.address 'nowhere': not an address" in capsys.readouterr().err


def test_the_body_gets_the_arguments_and_the_config_and_its_exit_status_is_mains(tmp_path: Path) -> None:
    seen = []

    def body(started: component.Started) -> int:
        seen.append((started.args.kubeconfig, started.cfg["unit_mib"], started.stop.is_set()))
        return component.EXIT_FAILED

    config_file = tmp_path / "config.yaml"
    config_file.write_text("unit_mib: 50\n")
    assert run(body, "--config", str(config_file), "--kubeconfig", "/k") == 1
    assert seen == [("/k", 50, False)]


def test_sigterm_sent_to_another_thread_stops_the_body_and_the_handlers_are_put_back(tmp_path: Path) -> None:
    """A signal the kernel hands to another thread (gRPC makes several) must still stop the
    component: Python runs handlers in the main thread only (Started.wait's reason)."""
    before = signal.getsignal(signal.SIGTERM)
    waiting = threading.Event()

    def body(started: component.Started) -> int:
        waiting.set()
        started.wait()
        return 0

    def send() -> None:
        assert waiting.wait(30)
        os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        assert run(body, "--config", str(tmp_path / "none.yaml")) == 0
    finally:
        sender.join()
    assert signal.getsignal(signal.SIGTERM) == before


def test_kubeconfig_is_offered_only_to_components_that_use_the_api(capsys) -> None:
    plain = component.Component("plain-agent", "no API")
    with pytest.raises(SystemExit) as exit_:
        component.main(plain, lambda started: 0, ["--kubeconfig", "/k"], environ={})
    assert exit_.value.code == 2
    assert "unrecognized arguments: --kubeconfig" in capsys.readouterr().err


def test_node_name_comes_from_node_name_then_the_host_name() -> None:
    assert component.node_name({"NODE_NAME": "gpu-1"}) == "gpu-1"
    assert component.node_name({}) == os.uname().nodename


# The components (the contract's list, contract/contract.yml): each one's module and console script.
COMPONENTS = [(c["module"], c["name"]) for c in contract.COMPONENTS]


def test_the_package_s_console_scripts_are_the_contract_s_components() -> None:
    """files/components/pyproject.toml names each console script; the contract lists the components
    (the roles, the image and the cluster check read that list)."""
    scripts = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {prog: f"vgpu_components.{module}:main" for module, prog in COMPONENTS}


@pytest.mark.parametrize(("module", "prog"), COMPONENTS)
def test_each_entry_point_has_help_and_rejects_a_bad_config(tmp_path: Path, module: str, prog: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-m", f"vgpu_components.{module}", "--help"], env=env, capture_output=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().startswith(f"usage: {prog}")
    assert "--config" in out.stdout.decode()
    bad = tmp_path / "bad.yaml"
    bad.write_text("unit_mib: -3\n")
    out = subprocess.run(
        [sys.executable, "-m", f"vgpu_components.{module}", "--config", str(bad)],
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 2
    assert "unit_mib" in out.stderr.decode()


class Recorded:
    def __init__(self, name: str, seen: list[str], fail: bool = False) -> None:
        self.name, self.seen, self.fail = name, seen, fail

    def start(self) -> None:
        if self.fail:
            raise RuntimeError(f"{self.name} cannot start")
        self.seen.append(f"start {self.name}")

    def stop(self) -> None:
        self.seen.append(f"stop {self.name}")


def test_serve_starts_the_parts_in_order_and_stops_them_in_reverse_after_the_signal() -> None:
    seen: list[str] = []
    stop = threading.Event()
    stop.set()  # the signal came
    started = component.Started(args=None, cfg={}, stop=stop)  # type: ignore[arg-type]
    assert component.serve(started, Recorded("a", seen), Recorded("b", seen)) == component.EXIT_OK
    assert seen == ["start a", "start b", "stop b", "stop a"]


def test_a_part_that_cannot_start_leaves_none_of_the_others_running() -> None:
    seen: list[str] = []
    started = component.Started(args=None, cfg={}, stop=threading.Event())  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="b cannot start"):
        component.serve(started, Recorded("a", seen), Recorded("b", seen, fail=True), Recorded("c", seen))
    assert seen == ["start a", "stop a"]
