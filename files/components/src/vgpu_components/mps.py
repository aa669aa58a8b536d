"""nvidia-mps, the process: runs the supervisor of the allocations' MPS daemons (mps_supervisor.py;
the protocol with the device plugin and the DRA driver is mps_requests.py) with its /healthz,
started and stopped together. Exit status 2 when the control binary is not on PATH."""

from __future__ import annotations

import logging
import os
import shutil
import sys

from vgpu_components import component, nvml
from vgpu_components.mps_supervisor import MpsManager

log = logging.getLogger("vgpu.mps")


COMPONENT = component.Component(
    "nvidia-mps",
    "Runs one MPS control daemon per GPU allocation, with the allocation's compute share and memory "
    "limit as the daemon's defaults (config: state_dir and the mps section).",
)


def run(started: component.Started) -> int:
    cfg = started.cfg
    binary = cfg["mps"]["control_binary"]
    if shutil.which(binary) is None:
        log.error("%s not found on PATH (%s)", binary, os.environ.get("PATH", ""))
        return component.EXIT_BAD_CONFIG
    backend: nvml.GpuBackend | None = None
    try:
        backend = nvml.NvmlBackend()
    except Exception as exc:
        log.warning("NVML unavailable (%s): the GPUs' compute modes are not checked", exc)
    manager = MpsManager(cfg, backend, stopping=started.stop)
    healthz = component.healthz(cfg["mps"]["healthz_port"], manager.healthy)
    # The manager's loop runs until the stop signal; then the manager quits every daemon.
    return component.serve(
        started, component.Closing(backend), healthz, manager, component.Background(manager.run, "mps-reconcile")
    )


def main(argv: list[str] | None = None) -> int:
    return component.main(COMPONENT, run, argv)


if __name__ == "__main__":
    sys.exit(main())
