"""What a container reaches of the GPU, as JSON on stdout: its device files, the driver's libraries in
the system library folders (where NVIDIA's runtime mounts them, and /usr/local), NVML (nvidia-smi's
library) with its device count or why it failed, LD_PRELOAD, and the driver's graphics files it got
(OpenGL, EGL and Vulkan libraries, the loaders' configuration files, DRM nodes: issue 38). Runs with the container's own
python3 (`kubectl exec ... -- python3 -c "$(cat tests/node/gpu_probe.py)"`): tests/node and
tests/gpu/kubelet share it."""

import ctypes
import glob
import json
import os
from typing import Any

found: dict[str, Any] = {"devices": sorted(glob.glob("/dev/nvidia*")), "ld_preload": os.environ.get("LD_PRELOAD", "")}
GRAPHICS = (
    "libGLX_nvidia.so",
    "libEGL_nvidia.so",
    "libGLESv2_nvidia.so",
    "libnvidia-glcore.so",
    "libnvidia-eglcore.so",
)
libraries: set[str] = set()
graphics: set[str] = set(glob.glob("/dev/dri/*"))
for top in (
    "/usr/lib",
    "/usr/lib64",
    "/lib",
    "/lib64",
    "/usr/local",
    "/etc/vulkan",
    "/usr/share/vulkan",
    "/usr/share/glvnd",
):
    for folder, _dirs, files in os.walk(top):
        libraries.update(
            os.path.realpath(os.path.join(folder, name))
            for name in files
            if name.startswith(("libcuda.so", "libnvidia-ml.so"))
        )
        graphics.update(
            os.path.join(folder, name)
            for name in files
            if (name.startswith(GRAPHICS) or name in ("nvidia_icd.json", "10_nvidia.json"))
            and os.path.exists(os.path.join(folder, name))  # not a link the toolkit's hook left pointing nowhere
        )
found["driver_libraries"] = sorted(libraries)
found["graphics"] = sorted(graphics)
try:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    count = ctypes.c_uint()
    rc = nvml.nvmlInit_v2() or nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    found["nvml"] = count.value if rc == 0 else f"NVML error {rc}"
except OSError as exc:
    found["nvml"] = f"no NVML: {exc}"
print(json.dumps(found))
