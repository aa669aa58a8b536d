"""The Python components' NVML backend (vgpu_components.nvml.NvmlBackend, through pynvml) against
the fake NVML with two 12 GiB GPUs: what the device plugin, cgpu-monitor and nvidia-mps call works.

Run by run-tests.sh with FAKE_GPUS=2 FAKE_TOTAL_MIB=12288, LD_LIBRARY_PATH at the fake driver and
files/components/src on PYTHONPATH; prints "ok" and exits 0, else raises. Needs pynvml (nvidia-ml-py).
"""

import pynvml
from vgpu_components import nvml

backend = nvml.NvmlBackend()
gpus = backend.gpus()
assert [g.index for g in gpus] == [0, 1], gpus
assert [g.uuid for g in gpus] == [
    "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f",
    "GPU-11111213-1415-1617-1819-1a1b1c1d1e1f",
], gpus
assert all(g.total_mib == 12288 and g.name == "Fake GPU" for g in gpus), gpus
memory = backend.memory(gpus[1].uuid)
assert memory.total_mib == 12288, memory
assert backend.wait_xid(10) == []
backend.set_compute_mode(gpus[1].uuid, nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS)
assert backend.compute_mode(gpus[1].uuid) == nvml.COMPUTE_MODE_EXCLUSIVE_PROCESS
assert backend.compute_mode(gpus[0].uuid) == nvml.COMPUTE_MODE_DEFAULT
# cgpu-monitor's ground truth (issue 12): the processes on each GPU, with pynvml's two calls
for index in (0, 1):
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(index))
    assert isinstance(procs, list), procs
# ... and the backend's own query, which also asks for MPS clients: a driver without the MPS call
# (this fake, like older branches without its _v3) still gives the compute processes.
for gpu in gpus:
    assert isinstance(backend.processes(gpu.uuid), list)
backend.close()
print("ok")
