"""A real framework at its quota (issue 37), run by tests/gpu/frameworks_at_quota.sh.

Usage: python3 frameworks_at_quota.py {torch,cupy,jax} FILL_MIB

Fills FILL_MIB of GPU memory with seeded random matrices of 64 MiB, then computes with kernels of
the framework's own and its libraries' (a matmul through cuBLAS, reductions, for PyTorch a cuDNN
convolution), and prints one line "result=<sums>" that the script compares between a native run
and a run under libvgpu: the same sizes and seeds, so the same numbers up to the last bits of
floating-point reordering. "holding" is printed once the memory is filled, for the sampler.
"""

from __future__ import annotations

import importlib
import sys
import time

MIB = 1 << 20
SIDE = 4096  # a 4096 x 4096 float32 matrix: 64 MiB


def torch_run(fill_mib: int) -> list[float]:
    torch = importlib.import_module("torch")
    torch.manual_seed(37)
    torch.backends.cudnn.deterministic = True
    mats = [torch.randn(SIDE, SIDE, device="cuda") for _i in range(max(2, fill_mib // 64 - 2))]
    print(f"holding {torch.cuda.memory_reserved() // MIB} MiB reserved", flush=True)
    prod = mats[0] @ mats[1]
    image = mats[2][:1024].reshape(1, 16, 256, 1024)
    conv = torch.nn.functional.conv2d(image, torch.ones(8, 16, 3, 3, device="cuda") / 144)
    torch.cuda.synchronize()
    time.sleep(2)
    return [float(prod.sum()), float(sum(m.sum() for m in mats)), float(conv.abs().sum())]


def cupy_run(fill_mib: int) -> list[float]:
    cupy = importlib.import_module("cupy")
    rs = cupy.random.RandomState(37)
    mats = [rs.standard_normal((SIDE, SIDE), dtype=cupy.float32) for _i in range(max(2, fill_mib // 64 - 2))]
    print(f"holding {cupy.get_default_memory_pool().total_bytes() // MIB} MiB in CuPy's pool", flush=True)
    prod = mats[0] @ mats[1]
    cupy.cuda.Device().synchronize()
    time.sleep(2)
    return [float(prod.sum()), float(sum(float(m.sum()) for m in mats)), float(cupy.abs(prod).max())]


def jax_run(fill_mib: int) -> list[float]:
    jax = importlib.import_module("jax")
    jnp = importlib.import_module("jax.numpy")
    keys = jax.random.split(jax.random.PRNGKey(37), max(2, fill_mib // 64 - 2))
    mats = [jax.random.normal(k, (SIDE, SIDE), dtype=jnp.float32) for k in keys]
    print("holding", flush=True)
    prod = jnp.dot(mats[0], mats[1], precision="highest")
    total = sum(float(m.sum()) for m in mats)
    prod.block_until_ready()
    time.sleep(2)
    return [float(prod.sum()), total, float(jnp.abs(prod).max())]


def main() -> int:
    framework, fill_mib = sys.argv[1], int(sys.argv[2])
    run = {"torch": torch_run, "cupy": cupy_run, "jax": jax_run}[framework]
    sums = run(fill_mib)
    print("result=" + ",".join(f"{v:.9e}" for v in sums), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
