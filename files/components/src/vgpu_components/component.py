"""The one main() of the five components: the command line, the config file, the logs, the stop
signals and the exit codes. Each component passes its name, its description and its body; the body
builds its parts and runs them with the one start and stop, serve().

Exit codes: 0 stopped by SIGTERM/SIGINT, 1 cannot run here (no driver, no API), 2 bad configuration.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vgpu_components import __version__, config, health, logs

DEFAULT_CONFIG_PATH = "/etc/vgpu/config.yaml"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_CONFIG = 2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass(frozen=True)
class Component:
    prog: str
    description: str
    kubeconfig_help: str | None = None  # the component talks to the API server: --kubeconfig


@dataclass(frozen=True)
class Started:
    """What a component's body gets: its arguments, its config, and the event a stop signal sets."""

    args: argparse.Namespace
    cfg: dict[str, Any]
    stop: threading.Event

    def wait(self, tick_s: float = 0.5) -> None:
        """Block the main thread until a stop signal.

        Python runs signal handlers in the main thread only, and a signal the kernel hands to another
        thread (gRPC makes several) does not wake a main thread blocked in a plain Event.wait(): the
        process then ignored SIGTERM until kubelet killed it. Waking every `tick_s` lets the handler
        run within that time."""
        while not self.stop.wait(tick_s):
            pass


Body = Callable[[Started], int]


def main(
    component: Component, body: Body, argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> int:
    """Parse the command line, load the config (a bad value: its name on stderr, exit 2), set up the
    logs and the stop signals, and run body; its return value is the exit code."""
    parser = argparse.ArgumentParser(prog=component.prog, description=component.description)
    parser.add_argument(
        "--config",
        default=DEFAULT_CONFIG_PATH,
        help=f"YAML config file shared by the components (default {DEFAULT_CONFIG_PATH}); "
        "any key can be overridden by VGPU_<KEY> or VGPU_<SECTION>_<KEY>",
    )
    if component.kubeconfig_help:
        parser.add_argument("--kubeconfig", help=component.kubeconfig_help)
    parser.add_argument("--version", action="version", version=__version__)
    args = parser.parse_args(argv)
    try:
        cfg = config.load(args.config, environ)
    except config.ConfigError as exc:
        return _bad_config(component, exc)
    logs.setup(component.prog, cfg["log_format"], cfg["log_level"])
    stop = threading.Event()
    previous = {number: signal.signal(number, lambda *_: stop.set()) for number in STOP_SIGNALS}
    try:
        return body(Started(args, cfg, stop))
    except config.ConfigError as exc:
        return _bad_config(component, exc)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class Part(Protocol):
    """What a component runs: started in order, stopped in the reverse order."""

    def start(self) -> object: ...

    def stop(self) -> object: ...


class Closing:
    """A resource that only needs closing when the component stops (an NVML backend)."""

    def __init__(self, resource: Any) -> None:
        self.resource = resource

    def start(self) -> Closing:
        return self

    def stop(self) -> None:
        if self.resource is not None:
            self.resource.close()


class Background:
    """A loop on a thread of its own that returns once the stop event is set (the caller's); stopping
    waits for it a little, as it stops at its next tick."""

    def __init__(self, target: Callable[[], object], name: str, join_s: float = 5.0) -> None:
        self.thread = threading.Thread(target=target, name=name, daemon=True)
        self.join_s = join_s

    def start(self) -> Background:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.join(self.join_s)


def serve(started: Started, *parts: Part) -> int:
    """The one start and stop of the components: each part started in order, then the wait for a
    stop signal, then each part started stopped in the reverse order (also when a later start
    failed, so nothing is left running). EXIT_OK."""
    running: list[Part] = []
    try:
        for part in parts:
            part.start()
            running.append(part)
        started.wait()
        logging.getLogger("vgpu.component").info("stopping")
    finally:
        for part in reversed(running):
            part.stop()
    return EXIT_OK


def terminate(process: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM to a child process, SIGKILL when it has not exited after grace_s; reaped either way."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def healthz(port: int, ok: Callable[[], tuple[bool, str]]) -> health.HealthServer:
    """The component's /healthz on its port, answering what ok() says (not started yet)."""
    return health.HealthServer("", port, {"/healthz": health.check(ok)})


def _bad_config(component: Component, exc: config.ConfigError) -> int:
    print(f"{component.prog}: bad configuration: {exc}", file=sys.stderr)
    return EXIT_BAD_CONFIG


def node_name(environ: Mapping[str, str] | None = None) -> str:
    """This node's name from NODE_NAME (downward API); falls back to the host name."""
    environ = os.environ if environ is None else environ
    return environ.get("NODE_NAME") or os.uname().nodename
