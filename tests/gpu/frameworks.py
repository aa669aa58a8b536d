"""Framework checks run by tests/gpu/run.sh inside an interposed "container" environment.

Each check prints what it saw and exits 0 when the framework behaved as a user of a quota of
VGPU_TEST_QUOTA_MIB MiB must see: the framework sizes itself from the quota and raises its own
out-of-memory error past it. Usage: python3 frameworks.py {torch,cupy,jax,pynvml}

Each check imports only its own framework (importlib), so one process initialises one of them.
"""

from __future__ import annotations

import importlib
import os
import sys

MIB = 1 << 20
QUOTA = int(os.environ.get("VGPU_TEST_QUOTA_MIB", "2000"))


def fail(msg: str) -> int:
    print(f"FAILED: {msg}")
    return 1


# Sizes leave room for the context charge (512 MiB by default) next to the data.
HALF, PAST, AGAIN = QUOTA // 2, QUOTA * 3 // 4, QUOTA * 5 // 8


def check_torch() -> int:
    torch = importlib.import_module("torch")

    free, total = torch.cuda.mem_get_info()
    print(f"torch {torch.__version__} allocator={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', 'default')}")
    print(f"mem_get_info free={free // MIB} MiB total={total // MIB} MiB")
    if total != QUOTA * MIB:
        return fail(f"total {total // MIB} MiB is not the quota {QUOTA} MiB")
    if free > total:
        return fail("free above total")
    half = torch.empty(HALF * MIB, dtype=torch.uint8, device="cuda")
    half.fill_(1)
    try:
        torch.empty(PAST * MIB, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as exc:
        print(f"OutOfMemoryError past the quota: {str(exc).splitlines()[0][:160]}")
    else:
        return fail("allocating past the quota succeeded")
    del half
    torch.cuda.empty_cache()
    again = torch.empty(AGAIN * MIB, dtype=torch.uint8, device="cuda")
    again.fill_(2)
    torch.cuda.synchronize()
    print(f"after freeing, {AGAIN} MiB fit again")
    return 0


def check_cupy() -> int:
    cupy = importlib.import_module("cupy")

    free, total = cupy.cuda.runtime.memGetInfo()
    print(f"cupy {cupy.__version__} memGetInfo free={free // MIB} MiB total={total // MIB} MiB")
    if total != QUOTA * MIB:
        return fail(f"total {total // MIB} MiB is not the quota")
    a = cupy.ones(HALF * MIB, dtype=cupy.uint8)
    try:
        cupy.ones(PAST * MIB, dtype=cupy.uint8)
    except cupy.cuda.memory.OutOfMemoryError as exc:
        print(f"OutOfMemoryError past the quota: {str(exc)[:160]}")
    else:
        return fail("allocating past the quota succeeded")
    del a
    cupy.get_default_memory_pool().free_all_blocks()
    b = cupy.ones(AGAIN * MIB, dtype=cupy.uint8)
    print(f"after freeing, {b.nbytes // MIB} MiB fit again")
    return 0


def check_jax() -> int:
    jax = importlib.import_module("jax")
    jnp = importlib.import_module("jax.numpy")

    dev = jax.devices()[0]
    stats = dev.memory_stats() or {}
    limit = int(stats.get("bytes_limit", 0))
    print(f"jax {jax.__version__} {dev} bytes_limit={limit // MIB} MiB")
    if not 0 < limit <= QUOTA * MIB:
        return fail(f"JAX pool {limit // MIB} MiB is not sized from the {QUOTA} MiB quota")
    x = jnp.ones((limit // 2 // 4,), dtype=jnp.float32)
    x.block_until_ready()
    try:
        y = jnp.ones((QUOTA * MIB // 4,), dtype=jnp.float32)
        y.block_until_ready()
    except Exception as exc:  # XLA reports RESOURCE_EXHAUSTED as a runtime error
        print(f"past the pool: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
        return 0 if "RESOURCE_EXHAUSTED" in str(exc) or "out of memory" in str(exc).lower() else 1
    return fail("a quota-sized array fitted next to another")


def check_pynvml() -> int:
    pynvml = importlib.import_module("pynvml")

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
    mem2 = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    want_used = int(os.environ.get("VGPU_TEST_USED_MIB", "0"))
    print(f"pynvml v1 total={mem.total // MIB} used={mem.used // MIB} free={mem.free // MIB} MiB")
    print(f"pynvml v2 total={mem2.total // MIB} used={mem2.used // MIB} reserved={mem2.reserved // MIB} MiB")
    if mem.total != QUOTA * MIB or mem2.total != QUOTA * MIB:
        return fail("NVML total is not the quota")
    if mem2.used // MIB != want_used:
        return fail(f"NVML used {mem2.used // MIB} MiB, the container holds {want_used} MiB")
    return 0


CHECKS = {"torch": check_torch, "cupy": check_cupy, "jax": check_jax, "pynvml": check_pynvml}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHECKS:
        sys.exit(f"usage: frameworks.py {{{','.join(CHECKS)}}}")
    sys.exit(CHECKS[sys.argv[1]]())
