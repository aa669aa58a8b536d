"""The rule of the runtime role's graphics filter (files/without_graphics.py, issue 38), pure: which
files and device nodes of an OCI specification are the driver's graphics, and what is left. The whole
chain (NVIDIA's runtime, the filter, runc's place) runs in tests/security/test_38_graphics_withheld.py."""

import copy
import importlib.util
import json
import os
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[4] / "roles" / "nvidia_container_runtime" / "files" / "without_graphics.py"
_spec = importlib.util.spec_from_file_location("without_graphics", _PATH)
assert _spec is not None and _spec.loader is not None
wg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wg)

LIB = "/usr/lib/x86_64-linux-gnu"
CTL = {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}
GPU = {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
CARD = {"path": "/dev/dri/card1", "type": "c", "major": 226, "minor": 1}
RENDER = {"path": "/dev/dri/renderD128", "type": "c", "major": 226, "minor": 128}


def rule(node):
    return {"allow": True, "type": node["type"], "major": node["major"], "minor": node["minor"], "access": "rwm"}


def spec(mounts, nodes):
    return {
        "mounts": [{"destination": p, "source": p, "type": "bind"} for p in mounts],
        "linux": {
            "devices": nodes,
            "resources": {"devices": [{"allow": False, "access": "rwm"}] + [rule(n) for n in nodes]},
        },
    }


@pytest.mark.parametrize(
    "path",
    [
        f"{LIB}/libGLX_nvidia.so.580.95.05",
        f"{LIB}/libGLX_nvidia.so.0",
        f"{LIB}/libEGL_nvidia.so.580.95.05",
        f"{LIB}/libGLESv1_CM_nvidia.so.1",
        f"{LIB}/libnvidia-glcore.so.580.95.05",
        f"{LIB}/libnvidia-eglcore.so.580.95.05",
        f"{LIB}/libnvidia-glvkspirv.so.580.95.05",
        f"{LIB}/libnvidia-egl-wayland.so.1.1.19",
        f"{LIB}/libnvidia-egl-wayland2.so.1.0.0",
        f"{LIB}/libnvidia-vulkan-producer.so.580.95.05",
        "/usr/lib64/libnvoptix.so.1",
        "/usr/lib/xorg/modules/drivers/nvidia_drv.so",
        "/usr/lib/xorg/modules/extensions/libglxserver_nvidia.so.580.95.05",
        "/etc/vulkan/icd.d/nvidia_icd.json",
        "/usr/share/vulkan/icd.d/nvidia_icd.x86_64.json",
        "/etc/vulkan/implicit_layer.d/nvidia_layers.json",
        "/usr/share/glvnd/egl_vendor.d/10_nvidia.json",
        "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json",
        "/usr/share/egl/egl_external_platform.d/09_nvidia_wayland2.json",
        "/dev/dri/card1",
    ],
)
def test_the_drivers_graphics_files_are_named_graphics(path):
    assert wg.is_graphics(path)


@pytest.mark.parametrize(
    "path",
    [
        f"{LIB}/libcuda.so.580.95.05",
        f"{LIB}/libnvidia-ml.so.1",
        f"{LIB}/libnvidia-ptxjitcompiler.so.580.95.05",
        f"{LIB}/libnvidia-gpucomp.so.580.95.05",  # the compute JIT uses it
        f"{LIB}/libnvidia-allocator.so.580.95.05",
        f"{LIB}/libnvidia-encode.so.580.95.05",
        f"{LIB}/libnvidia-ngx.so.580.95.05",
        f"{LIB}/libGLX.so.0",  # glvnd's own dispatcher, the image's
        f"{LIB}/libnvidia-glcore.so.580.95.05.bak",
        "/usr/bin/nvidia-smi",
        "/opt/vgpu/libcuda.so.1",
        "/etc/vulkan/icd.d/intel_icd.json",
        "/run/nvidia-persistenced/socket",
    ],
)
def test_compute_video_and_others_files_are_not(path):
    assert not wg.is_graphics(path)


def test_a_gpu_container_loses_its_graphics_files_its_drm_nodes_and_their_cgroup_rules():
    before = spec(
        [f"{LIB}/libcuda.so.1", f"{LIB}/libGLX_nvidia.so.0", "/etc/vulkan/icd.d/nvidia_icd.json"],
        [CTL, GPU, CARD, RENDER],
    )
    after = copy.deepcopy(before)
    removed = wg.without_graphics(after)
    assert removed == sorted(
        ["/dev/dri/card1", "/dev/dri/renderD128", f"{LIB}/libGLX_nvidia.so.0", "/etc/vulkan/icd.d/nvidia_icd.json"]
    )
    assert [m["destination"] for m in after["mounts"]] == [f"{LIB}/libcuda.so.1"]
    assert after["linux"]["devices"] == [CTL, GPU]
    assert after["linux"]["resources"]["devices"] == [{"allow": False, "access": "rwm"}, rule(CTL), rule(GPU)]


def test_a_rule_another_kept_node_needs_stays():
    """A DRM node backed by the same device number as a node the container keeps (a test's stand-in,
    or an operator's own mapping): the rule is the kept node's too."""
    alias = dict(CARD, major=195, minor=0)
    after = spec([], [CTL, GPU, alias])
    wg.without_graphics(after)
    assert rule(GPU) in after["linux"]["resources"]["devices"]


def test_a_container_without_an_nvidia_gpu_is_left_alone():
    """Another device plugin's DRM nodes (an integrated GPU, a video card) are not NVIDIA's to withhold."""
    before = spec(["/etc/vulkan/icd.d/nvidia_icd.json"], [CARD, RENDER])
    after = copy.deepcopy(before)
    assert wg.without_graphics(after) == []
    assert after == before


@pytest.mark.parametrize(
    ("args", "bundle"),
    [
        (["create", "--bundle", "/run/b", "id"], "/run/b"),
        (["create", "-b", "/run/b", "id"], "/run/b"),
        (["create", "--bundle=/run/b", "id"], "/run/b"),
        (["--root", "/r", "run", "--pid-file", "/p", "id"], "."),
    ],
)
def test_the_bundle_is_found_as_runc_reads_it(args, bundle):
    assert wg.bundle_of(args) == bundle


def test_a_rewritten_specification_keeps_its_mode_and_an_unreadable_one_is_left_to_runc(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(spec([f"{LIB}/libEGL_nvidia.so.0"], [CTL])))
    path.chmod(0o600)
    assert wg.rewrite(str(path)) == [f"{LIB}/libEGL_nvidia.so.0"]
    assert json.loads(path.read_text())["mounts"] == []
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert list(tmp_path.iterdir()) == [path]
    path.write_text("{not json")
    assert wg.rewrite(str(path)) == []
    assert path.read_text() == "{not json"
    assert wg.rewrite(str(tmp_path / "missing.json")) == []
