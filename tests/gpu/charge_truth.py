"""PyTorch on the cudaMallocAsync backend, cuBLAS and CuPy in one process under libvgpu (issue 24).

Run by tests/gpu/charge_truth.sh in a container with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync:
PyTorch's pool keeps what it frees (release threshold UINT64_MAX), cuBLAS takes its workspace,
CuPy allocates through its own pool (cudaMalloc): together they fill the quota until one of them
gets an out-of-memory error, while the shell script reads the GPU's own count of this process
(nvidia-smi) from outside. Exit status 2: an out-of-memory error came (expected); 1: none did.
"""

import sys
import time

import cupy
import torch

MIB = 1 << 20


def main() -> int:
    dev = torch.device("cuda")
    held: list[object] = []
    oom = ""
    try:
        for i in range(200):
            t = torch.empty(256 * MIB, dtype=torch.uint8, device=dev)
            t.fill_(1)
            held.append(t)
            if i % 3 == 2:
                held.pop(0)  # freed into PyTorch's pool, which keeps it
            a = torch.randn(2048, 2048, device=dev)
            float((a @ a).sum())  # cuBLAS and its workspace
            x = cupy.ones(128 * MIB, dtype=cupy.uint8)  # CuPy's pool: cudaMalloc
            held.append(x)
            torch.cuda.synchronize()
    except torch.OutOfMemoryError as exc:
        oom = f"torch OutOfMemoryError: {str(exc).splitlines()[0]}"
    except cupy.cuda.memory.OutOfMemoryError as exc:
        oom = f"cupy OutOfMemoryError: {exc}"
    print(oom or "no out-of-memory error", flush=True)
    print(f"held {len(held)} buffers; torch reserved {torch.cuda.memory_reserved() // MIB} MiB", flush=True)
    print("holding", flush=True)
    time.sleep(5)
    return 2 if oom else 1


if __name__ == "__main__":
    sys.exit(main())
