"""Issue 28, finding 1: a pod without GPU memory units got every GPU of its node by setting
NVIDIA_VISIBLE_DEVICES=all in its own env (nvidia is containerd's default runtime, and NVIDIA's
runtime as shipped takes that variable from unprivileged containers).

NVIDIA's real nvidia-container-runtime, built from the pinned sources (toolkit_binaries.py), runs
here with the configuration the runtime role writes (its tasks/settings.yml, run for real) in its cdi
mode with a static CDI specification of two GPUs (no GPU needed: device files stand in for them), and
a stand-in low-level runtime that keeps the OCI specification it is handed. The specifications are
what containerd would hand it: the container contract of the device plugin's Allocate
(container.container_contract) and of the DRA driver's CDI device (dra.cdi_spec), turned into OCI
mounts as kubelet and containerd do. Which device files the container gets decides.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import tomllib
import toolkit_binaries
from role_render import ROOT, role_tasks_play, run_playbook
from vgpu_components import config, container, dra
from vgpu_components.nvml import Gpu

GPUS = [Gpu(uuid="GPU-00000000-1111-2222-3333-444444444444", index=0, total_mib=12288),
        Gpu(uuid="GPU-55555555-6666-7777-8888-999999999999", index=1, total_mib=12288)]  # fmt: skip
NODES = [{"path": f"/dev/nvidia{g.index}", "hostPath": "/dev/null"} for g in GPUS]
# The NVIDIA runtime's static CDI specification (cdi mode): the GPUs by UUID and "all", each a device
# file; /dev/null stands in for the real device files, only their container paths matter here.
SPEC = {
    "cdiVersion": "0.6.0",
    "kind": "nvidia.com/gpu",
    "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/dev/null"}]},
    "devices": [
        {
            "name": "all",
            "containerEdits": {"deviceNodes": NODES},
        },
        *({"name": g.uuid, "containerEdits": {"deviceNodes": [node]}} for g, node in zip(GPUS, NODES, strict=True)),
    ],
}
# The low-level runtime the NVIDIA runtime hands the modified specification to: it keeps it.
KEEPER = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --bundle|-b) bundle=$2; shift;; esac; shift; done
cp "$bundle/config.json" "$bundle/handed.json"
"""


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The NVIDIA runtime's configuration file, as the role leaves it, plus the test's plumbing."""
    tools = toolkit_binaries.folder()
    tmp = tmp_path_factory.mktemp("runtime")
    path = tmp / "config.toml"
    default = [str(tools / "nvidia-ctk"), "config", "default"]
    path.write_text(subprocess.run(default, capture_output=True, text=True, check=True).stdout)
    (tmp / "play.yml").write_text(
        role_tasks_play("The runtime's settings, as the role sets them", "nvidia_container_runtime", "settings.yml")
    )
    variables = {"nvidia_container_runtime_mode": "cdi", "__nvidia_container_runtime_config_file": str(path)}
    run_playbook(str(tmp / "play.yml"), "-e", json.dumps(variables), path_prefix=str(tools))
    (tmp / "cdi").mkdir()
    (tmp / "cdi" / "gpus.json").write_text(json.dumps(SPEC))
    keeper = tmp / "keeper"
    keeper.write_text(KEEPER)
    keeper.chmod(0o755)
    # Test plumbing only: where the static specification is, and the stand-in low-level runtime.
    plumbing = [f"--set=nvidia-container-runtime.modes.cdi.spec-dirs={tmp / 'cdi'}"]
    plumbing.append(f"--set=nvidia-container-runtime.runtimes={keeper}")
    subprocess.run([str(tools / "nvidia-ctk"), "config", f"--config-file={path}", "--in-place", *plumbing], check=True)
    return path


def devices(
    runtime: Path,
    tmp_path: Path,
    *,
    env: dict[str, str],
    mounts: Sequence[tuple[str, str]] = (),
    privileged: bool = False,
) -> list[str]:
    """The device files the NVIDIA runtime gives a container (OCI `create`) with this env and these
    (container path, host path) bind mounts."""
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    capabilities = ["CAP_CHOWN", "CAP_SYS_ADMIN"] if privileged else ["CAP_CHOWN"]
    spec: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "process": {
            "args": ["sh"],
            "cwd": "/",
            "env": ["PATH=/usr/bin:/bin", *(f"{k}={v}" for k, v in env.items())],
            "capabilities": {"bounding": capabilities},
        },
        "root": {"path": "rootfs"},
        "mounts": [{"destination": c, "source": h, "type": "bind", "options": ["rbind", "ro"]} for c, h in mounts],
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    tools = toolkit_binaries.folder()
    result = subprocess.run(
        [str(tools / "nvidia-container-runtime"), "create", "--bundle", str(bundle), "c"],
        env=dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=str(runtime)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    handed = json.loads((bundle / "handed.json").read_text())
    return sorted(d["path"] for d in (handed.get("linux") or {}).get("devices") or [])


def contract(gpu: Gpu) -> container.Allocation:
    cfg = config.load(None, environ={})
    return container.container_contract(gpu, 30, 100, "a" * 16, cfg)


def test_the_role_turns_the_env_off_and_the_device_list_mounts_on(runtime: Path) -> None:
    settings = tomllib.loads(runtime.read_text())
    assert settings["accept-nvidia-visible-devices-envvar-when-unprivileged"] is False
    assert settings["accept-nvidia-visible-devices-as-volume-mounts"] is True


def test_a_container_that_names_every_gpu_in_its_env_gets_none(runtime: Path, tmp_path: Path) -> None:
    """The finding: a pod without units, NVIDIA_VISIBLE_DEVICES=all (also in the image's ENV)."""
    assert devices(runtime, tmp_path, env={"NVIDIA_VISIBLE_DEVICES": "all"}) == []


def test_a_volume_of_its_own_at_the_device_list_path_gets_none(runtime: Path, tmp_path: Path) -> None:
    """An emptyDir (or any volume but a hostPath of /dev/null) at the device-list path names no GPU:
    the runtime trusts a mount there only when its source is /dev/null."""
    empty_dir = "/var/lib/kubelet/pods/0000/volumes/kubernetes.io~empty-dir/forged"
    got = devices(runtime, tmp_path, env={}, mounts=[(f"{container.DEVICE_LIST_ROOT}/all", empty_dir)])
    assert got == []


def test_the_device_plugins_contract_gives_the_container_its_gpu_only(runtime: Path, tmp_path: Path) -> None:
    """Allocate's env and mounts (as kubelet hands them to the runtime) select the allocated GPU, even
    when the container's own env names every GPU (kubelet puts the pod's env after Allocate's)."""
    allocation = contract(GPUS[1])
    env = {**allocation.envs, "NVIDIA_VISIBLE_DEVICES": "all"}
    got = devices(runtime, tmp_path, env=env, mounts=[(c, h) for c, h, _ro in allocation.mounts])
    assert got == ["/dev/nvidia1", "/dev/nvidiactl"]


def test_the_dra_drivers_cdi_device_gives_the_container_its_gpu_only(runtime: Path, tmp_path: Path) -> None:
    """The DRA path: the claim's CDI device carries the same contract; containerd applies its mounts
    (hostPath, containerPath) and env before the NVIDIA runtime reads them."""
    spec = dra.cdi_spec("vgpu.io/claim", [(["x"], contract(GPUS[0]))], {})
    edits = spec["devices"][0]["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    mounts = [(m["containerPath"], m["hostPath"]) for m in edits["mounts"]]
    assert devices(runtime, tmp_path, env=env, mounts=mounts) == ["/dev/nvidia0", "/dev/nvidiactl"]


def test_a_privileged_container_still_gets_what_its_env_names(runtime: Path, tmp_path: Path) -> None:
    """Privileged (CAP_SYS_ADMIN) is root on the node anyway: the runtime reads its env, as the
    components' privileged nvidia-mps needs. PodSecurity baseline keeps workloads from it."""
    got = devices(runtime, tmp_path, env={"NVIDIA_VISIBLE_DEVICES": "all"}, privileged=True)
    assert got == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"]


def test_containerd_passes_no_pod_annotation_to_the_nvidia_runtime() -> None:
    """The runtime's cdi mode also takes devices from cdi.k8s.io/ annotations of the container:
    containerd passes a pod's annotations to it only when the runtime's options list them
    (pod_annotations, container_annotations), which neither containerd template of the roles does."""
    for template in (
        ROOT / "roles/kubeadm/templates/containerd-config.toml.j2",
        ROOT / "roles/nvidia_container_runtime/templates/99-nvidia.toml.j2",
    ):
        text = template.read_text()
        assert "pod_annotations" not in text and "container_annotations" not in text, template
