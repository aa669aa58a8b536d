"""Issue 24, case 5: open the real driver by the absolute path the loader cache lists (not by its
name, which LD_LIBRARY_PATH=/opt/vgpu would answer with libvgpu), and allocate through it.

    python3 dlopen_by_path.py MIB

libvgpu preloaded (the container contract's LD_PRELOAD) hooks dlsym, so the functions found in the
real library are its hooks and the quota holds. Prints the path and the result; exit status 0 when
the allocation succeeded, 2 on CUDA_ERROR_OUT_OF_MEMORY, 1 otherwise. Runs with the container's own
python3 (`python3 -c "$(cat tests/node/dlopen_by_path.py)" MIB`): tests/node and tests/gpu/kubelet
share it."""

import ctypes
import os
import subprocess
import sys

FOLDERS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib")


def real_libcuda() -> str:
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        cache = ""
    for line in cache.splitlines():
        name, _arrow, path = line.partition("=>")
        if name.strip().startswith("libcuda.so.1 ") and not path.strip().startswith("/opt/"):
            return path.strip()
    # A runtime without a loader-cache hook (the fake driver's static CDI spec): where it mounts it.
    for folder in FOLDERS:
        if os.path.exists(os.path.join(folder, "libcuda.so.1")):
            return os.path.join(folder, "libcuda.so.1")
    sys.exit("no libcuda.so.1 in the loader cache or in " + ", ".join(FOLDERS))


mib = int(sys.argv[1])
path = real_libcuda()
cuda = ctypes.CDLL(path)
device, context, pointer = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
steps = [
    ("cuInit", lambda: cuda.cuInit(0)),
    ("cuDeviceGet", lambda: cuda.cuDeviceGet(ctypes.byref(device), 0)),
    ("cuDevicePrimaryCtxRetain", lambda: cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device)),
    ("cuCtxSetCurrent", lambda: cuda.cuCtxSetCurrent(context)),
    ("cuMemAlloc_v2", lambda: cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(mib << 20))),
]
for name, call in steps:
    rc = call()
    if rc != 0:
        print(f"{name} through {path} ({mib} MiB): rc={rc}" + (" CUDA_ERROR_OUT_OF_MEMORY" if rc == 2 else ""))
        sys.exit(2 if rc == 2 else 1)
print(f"cuMemAlloc_v2 through {path}: {mib} MiB allocated")
