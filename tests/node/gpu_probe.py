"""What a container reaches of the GPU, as JSON on stdout: its device files, the driver's libraries in
the system library folders (where NVIDIA's runtime mounts them, and /usr/local), NVML (nvidia-smi's
library) with its device count or why it failed, and LD_PRELOAD. Runs with the container's own
python3 (`kubectl exec ... -- python3 -c "$(cat tests/node/gpu_probe.py)"`): tests/node and
tests/gpu/kubelet share it."""

import ctypes
import glob
import json
import os
from typing import Any

found: dict[str, Any] = {"devices": sorted(glob.glob("/dev/nvidia*")), "ld_preload": os.environ.get("LD_PRELOAD", "")}
libraries: set[str] = set()
for top in ("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local"):
    for folder, _dirs, files in os.walk(top):
        libraries.update(
            os.path.realpath(os.path.join(folder, name))
            for name in files
            if name.startswith(("libcuda.so", "libnvidia-ml.so"))
        )
found["driver_libraries"] = sorted(libraries)
try:
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    count = ctypes.c_uint()
    rc = nvml.nvmlInit_v2() or nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    found["nvml"] = count.value if rc == 0 else f"NVML error {rc}"
except OSError as exc:
    found["nvml"] = f"no NVML: {exc}"
print(json.dumps(found))
