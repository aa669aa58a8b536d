"""Multi-GPU checks of libvgpu, run by tests/gpu/multi_gpu.sh on a host with two or more GPUs.

Usage: python3 multi_gpu.py {per-device,placed} (inside an interposed environment)

per-device: the quota names two devices ("0:3000MiB,1:2000MiB"); each GPU reports its own quota
            as total and refuses allocations past its own quota, independently of the other.
placed:     the container was placed on one GPU of two (CUDA_VISIBLE_DEVICES=<that GPU's UUID>,
            as the device plugin's NVIDIA_VISIBLE_DEVICES does in a real container); the one
            device the process sees is that GPU, with the quota of device 0.
"""

from __future__ import annotations

import os
import sys

import torch

MIB = 1 << 20


def fail(msg: str) -> int:
    print(f"FAILED: {msg}")
    return 1


def fits(device: int, mib: int) -> bool:
    try:
        block = torch.empty(mib * MIB, dtype=torch.uint8, device=f"cuda:{device}")
        block.fill_(1)
        torch.cuda.synchronize(device)
    except torch.OutOfMemoryError:
        return False
    del block
    torch.cuda.empty_cache()
    return True


def per_device() -> int:
    if torch.cuda.device_count() < 2:
        return fail(f"needs two visible GPUs, sees {torch.cuda.device_count()}")
    for device, quota in ((0, 3000), (1, 2000)):
        _free, total = torch.cuda.mem_get_info(device)
        print(f"cuda:{device} mem_get_info total={total // MIB} MiB (quota {quota} MiB)")
        if total != quota * MIB:
            return fail(f"cuda:{device} total {total // MIB} MiB is not its quota {quota} MiB")
    # 1800 MiB fits GPU 0's 3000 MiB (with its context) but not GPU 1's 2000 MiB.
    if not fits(0, 1800):
        return fail("1800 MiB did not fit the 3000 MiB quota of cuda:0")
    if fits(1, 1800):
        return fail("1800 MiB fitted the 2000 MiB quota of cuda:1 next to its context charge")
    if not fits(1, 1000):
        return fail("1000 MiB did not fit the 2000 MiB quota of cuda:1")
    print("each GPU enforces its own quota")
    return 0


def placed() -> int:
    want = os.environ["VGPU_TEST_PLACED_UUID"]
    if torch.cuda.device_count() != 1:
        return fail(f"the container should see one GPU, sees {torch.cuda.device_count()}")
    uuid = "GPU-" + str(torch.cuda.get_device_properties(0).uuid)
    print(f"cuda:0 is {uuid}; the plugin placed the container on {want}")
    if uuid != want:
        return fail("the visible GPU is not the one the container was placed on")
    _free, total = torch.cuda.mem_get_info(0)
    print(f"cuda:0 mem_get_info total={total // MIB} MiB")
    if total != 3000 * MIB:
        return fail(f"total {total // MIB} MiB is not the quota 3000 MiB")
    if not fits(0, 1200):
        return fail("the 1200 MiB app did not run under 3000 MiB")
    if fits(0, 2800):
        return fail("2800 MiB fitted a 3000 MiB quota next to the context charge")
    print("the placed GPU enforces the container's quota")
    return 0


if __name__ == "__main__":
    checks = {"per-device": per_device, "placed": placed}
    if len(sys.argv) != 2 or sys.argv[1] not in checks:
        raise SystemExit(__doc__)
    sys.exit(checks[sys.argv[1]]())
