"""Issue 38, graphics memory: with `vgpu_graphics_enabled` off (the default) no GPU container may get
the driver's graphics libraries (OpenGL, Vulkan, EGL), whatever its NVIDIA_DRIVER_CAPABILITIES says.
The runtime's supported-driver-capabilities held that only in its legacy mode: in the cdi and jit-cdi
modes (`auto`'s choice on NVML hosts) NVIDIA's runtime mounts every library of the driver, and the
DRM device nodes, into every GPU container.

NVIDIA's real nvidia-container-runtime, built from the pinned sources (toolkit_binaries.py), runs
here with the configuration and the low-level runtime the runtime role installs (its tasks/graphics.yml
and settings.yml, run for real) in its cdi mode, with a static CDI specification shaped like the one
`nvidia-ctk cdi generate` writes for a 580 driver (its graphics mounts, configuration files and DRM
nodes beside the compute ones; /dev/null stands in for device files: no GPU here). At the end of the
chain a stand-in for runc keeps the OCI specification it is handed and the arguments it got.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import toolkit_binaries
from role_render import role_tasks_play, run_playbook
from vgpu_components import config, container
from vgpu_components.nvml import Gpu

GPU = Gpu(uuid="GPU-00000000-1111-2222-3333-444444444444", index=0, total_mib=12288)
LIB = "/usr/lib/x86_64-linux-gnu"
VERSION = "580.95.05"
COMPUTE = [
    *(
        f"{LIB}/{name}.so.{VERSION}"
        for name in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler", "libnvidia-gpucomp")
    ),
    *(
        f"{LIB}/{name}.so.{VERSION}"
        for name in ("libnvidia-allocator", "libnvidia-nvvm", "libnvidia-encode", "libnvcuvid")
    ),
    "/usr/bin/nvidia-smi",
]
GRAPHICS = [
    *(
        f"{LIB}/{name}.so.{VERSION}"
        for name in (
            "libGLX_nvidia",
            "libEGL_nvidia",
            "libGLESv2_nvidia",
            "libGLESv1_CM_nvidia",
            "libnvidia-glcore",
            "libnvidia-eglcore",
            "libnvidia-glsi",
            "libnvidia-glvkspirv",
            "libnvidia-tls",
            "libnvidia-rtcore",
            "libnvoptix",
            "libnvidia-vulkan-producer",
            "libnvidia-fbc",
        )
    ),
    f"{LIB}/libnvidia-egl-gbm.so.1.1.2",
    f"{LIB}/libnvidia-egl-wayland.so.1.1.19",
    "/etc/vulkan/icd.d/nvidia_icd.json",
    "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
    "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
    "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
    "/usr/share/egl/egl_external_platform.d/10_nvidia_wayland.json",
    "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
    f"/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.{VERSION}",
]
DRI = ["/dev/dri/card1", "/dev/dri/renderD128"]


def mount(path: str) -> dict[str, Any]:
    return {"hostPath": "/dev/null", "containerPath": path, "options": ["ro", "nosuid", "nodev", "bind"]}


# What `nvidia-ctk cdi generate` writes, cut to what matters here: the driver's files for every
# device, and each GPU's device file with its DRM nodes.
SPEC = {
    "cdiVersion": "0.6.0",
    "kind": "nvidia.com/gpu",
    "containerEdits": {
        "deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/dev/null"}],
        "mounts": [mount(p) for p in COMPUTE + GRAPHICS],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-cdi-hook",
                "args": [
                    "nvidia-cdi-hook",
                    "create-symlinks",
                    "--link",
                    f"libGLX_nvidia.so.{VERSION}::{LIB}/libGLX_nvidia.so.0",
                ],
            }
        ],
    },
    "devices": [
        {
            "name": name,
            "containerEdits": {
                "deviceNodes": [{"path": "/dev/nvidia0", "hostPath": "/dev/null"}]
                + [{"path": p, "hostPath": "/dev/zero"} for p in DRI],
            },
        }
        for name in ("all", GPU.uuid)
    ],
}
# runc's stand-in, on PATH: it keeps the specification it is handed and its arguments.
RUNC = """#!/bin/sh
bundle=$PWD
for a in "$@"; do [ "$prev" = --bundle ] && bundle=$a; prev=$a; done
[ -f "$bundle/config.json" ] && cp "$bundle/config.json" "$bundle/handed.json"
printf '%s\\n' "$@" > "$bundle/argv"
"""


def configure(tools: Path, folder: Path, **settings: object) -> Path:
    """The runtime's configuration file and low-level runtime as the role leaves them."""
    path = folder / "config.toml"
    if not path.exists():
        default = [str(tools / "nvidia-ctk"), "config", "default"]
        path.write_text(subprocess.run(default, capture_output=True, text=True, check=True).stdout)
    variables = {
        "nvidia_container_runtime_mode": "cdi",
        "__nvidia_container_runtime_config_file": str(path),
        "__nvidia_container_runtime_libexec_dir": str(folder / "libexec"),
        **settings,
    }
    for tasks in ("graphics.yml", "settings.yml"):
        (folder / "play.yml").write_text(role_tasks_play("The runtime role", "nvidia_container_runtime", tasks))
        run_playbook(str(folder / "play.yml"), "-e", json.dumps(variables), path_prefix=str(tools))
    (folder / "cdi").mkdir(exist_ok=True)
    (folder / "cdi" / "gpus.json").write_text(json.dumps(SPEC))
    # Test plumbing only: where the static specification is.
    plumbing = f"--set=nvidia-container-runtime.modes.cdi.spec-dirs={folder / 'cdi'}"
    subprocess.run([str(tools / "nvidia-ctk"), "config", f"--config-file={path}", "--in-place", plumbing], check=True)
    return path


@pytest.fixture(scope="module")
def tools() -> Path:
    return toolkit_binaries.folder()


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bin")
    (folder / "runc").write_text(RUNC)
    (folder / "runc").chmod(0o755)
    return folder


def run(tools: Path, runtime: Path, stand_in: Path, bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NVIDIA_CTK_CONFIG_FILE_PATH=str(runtime), PATH=f"{stand_in}:{os.environ['PATH']}")
    command = [str(tools / "nvidia-container-runtime"), *args]
    return subprocess.run(command, cwd=bundle, env=env, capture_output=True, text=True, timeout=60, check=False)


def create(tools: Path, runtime: Path, stand_in: Path, tmp: Path, env: dict[str, str]) -> dict[str, Any]:
    """The OCI specification runc gets for a container with the device plugin's contract and this env."""
    allocation = container.container_contract(GPU, 30, 100, "a" * 16, config.load(None, environ={}))
    bundle = tmp / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    spec = {
        "ociVersion": "1.0.2",
        "process": {
            "args": ["sh"],
            "cwd": "/",
            "env": ["PATH=/usr/bin:/bin", *(f"{k}={v}" for k, v in {**allocation.envs, **env}.items())],
            "capabilities": {"bounding": ["CAP_CHOWN"]},
        },
        "root": {"path": "rootfs"},
        "mounts": [
            {"destination": path, "source": host, "type": "bind", "options": ["rbind", "ro"]}
            for path, host, _ro in allocation.mounts
        ],
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }
    (bundle / "config.json").write_text(json.dumps(spec))
    result = run(tools, runtime, stand_in, bundle, "--root", "/run/runc-test", "create", "--bundle", str(bundle), "c1")
    assert result.returncode == 0, result.stderr
    return json.loads((bundle / "handed.json").read_text())


def mounted(spec: dict[str, Any]) -> set[str]:
    return {m["destination"] for m in spec.get("mounts", [])}


def device_files(spec: dict[str, Any]) -> set[str]:
    return {d["path"] for d in spec["linux"].get("devices", [])}


def allowed(spec: dict[str, Any]) -> set[tuple[int, int]]:
    rules = spec["linux"].get("resources", {}).get("devices", [])
    return {(r.get("major"), r.get("minor")) for r in rules if r.get("allow")}


@pytest.mark.parametrize("capabilities", ["all", "graphics,compute,utility", "compute,utility"])
def test_a_gpu_container_gets_no_graphics_files_unless_the_operator_enables_them(
    tools: Path, stand_in: Path, tmp_path: Path, capabilities: str
) -> None:
    """The finding: in the cdi modes the container got every graphics library, the Vulkan and EGL
    configuration, and the GPU's DRM nodes (the doors to graphics memory), whatever it asked for.
    Withheld, it keeps every compute, video and utility file and its GPU, and no cgroup rule opens a
    DRM node for it."""
    runtime = configure(tools, tmp_path)
    handed = create(tools, runtime, stand_in, tmp_path, {"NVIDIA_DRIVER_CAPABILITIES": capabilities})
    assert sorted(mounted(handed) & set(GRAPHICS)) == []
    assert set(COMPUTE) <= mounted(handed)
    assert device_files(handed) == {"/dev/nvidia0", "/dev/nvidiactl"}
    zero = os.stat("/dev/zero").st_rdev
    assert (os.major(zero), os.minor(zero)) not in allowed(handed)
    null = os.stat("/dev/null").st_rdev
    assert (os.major(null), os.minor(null)) in allowed(handed)  # the GPU's own device files


def test_with_graphics_enabled_the_runtime_hands_them_as_nvidia_ships_it(
    tools: Path, stand_in: Path, tmp_path: Path
) -> None:
    """vgpu_graphics_enabled (per node) gives the toolkit's own behaviour back: runc directly."""
    runtime = configure(tools, tmp_path, vgpu_graphics_enabled=True)
    handed = create(tools, runtime, stand_in, tmp_path, {"NVIDIA_DRIVER_CAPABILITIES": "all"})
    assert set(GRAPHICS) <= mounted(handed)
    assert device_files(handed) == {"/dev/nvidia0", "/dev/nvidiactl", *DRI}
    # and a node switched back withholds them again
    runtime = configure(tools, tmp_path)
    handed = create(tools, runtime, stand_in, tmp_path, {"NVIDIA_DRIVER_CAPABILITIES": "all"})
    assert mounted(handed) & set(GRAPHICS) == set()


def test_a_container_without_a_gpu_and_every_other_command_reach_runc_untouched(
    tools: Path, stand_in: Path, tmp_path: Path
) -> None:
    """nvidia is the GPU nodes' default runtime: every container and every runc command of the node
    goes through the filter, which must change nothing but a GPU container's graphics files: runc
    gets what it gets from NVIDIA's runtime directly (graphics enabled), byte for byte."""
    text = json.dumps(
        {"ociVersion": "1.0.2", "process": {"args": ["sh"], "env": ["PATH=/bin"]}, "root": {"path": "rootfs"}}
    )
    handed = {}
    for enabled in (True, False):
        runtime = configure(tools, tmp_path, vgpu_graphics_enabled=enabled)
        bundle = tmp_path / f"plain-{enabled}"
        (bundle / "rootfs").mkdir(parents=True)
        (bundle / "config.json").write_text(text)
        result = run(tools, runtime, stand_in, bundle, "--log-format", "json", "create", "-b", str(bundle), "plain")
        assert result.returncode == 0, result.stderr
        handed[enabled] = (bundle / "handed.json").read_text()
        assert (bundle / "argv").read_text().split() == ["--log-format", "json", "create", "-b", str(bundle), "plain"]
    assert handed[False] == handed[True]
    for command in (["state", "plain"], ["kill", "plain", "9"], ["delete", "--force", "plain"]):
        result = run(tools, runtime, stand_in, bundle, "--root", "/run/x", *command)
        assert result.returncode == 0, result.stderr
        assert (bundle / "argv").read_text().split() == ["--root", "/run/x", *command]
