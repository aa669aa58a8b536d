"""PyTorch CUDA graphs under libvgpu with the cudaMallocAsync backend (issue 18).

    PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync VGPU_TEST_QUOTA_MIB=4096 python3 graph_memory.py FACTOR

Captures a CUDA graph that allocates FACTOR x the quota (cudaMallocAsync during stream capture
becomes a graph memory node) and writes it, then replays it three times. With the memory counted
(FACTOR 1.5) the capture ends in an out-of-memory error: exit 2. Within the quota (FACTOR 0.5) the
graph runs, and while it lives a further allocation of 0.6 x the quota, which would only fit if
the graph's memory were not counted, must be refused: exit 0. Any other outcome: exit 1.
"""

import os
import sys

import torch


def error_chain(exc: BaseException) -> list[str]:
    """The exception and the ones it was raised from or during, one line each."""
    out: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        first = str(cur).strip().splitlines()[0] if str(cur).strip() else ""
        out.append(f"{type(cur).__name__}: {first}")
        cur = cur.__cause__ or cur.__context__
    return out


def is_oom(chain: list[str]) -> bool:
    return any("OutOfMemoryError" in c or "out of memory" in c.lower() for c in chain)


def main() -> int:
    factor = float(sys.argv[1])
    quota_mib = int(os.environ["VGPU_TEST_QUOTA_MIB"])
    backend = torch.cuda.get_allocator_backend()
    if backend != "cudaMallocAsync":
        print(f"allocator backend is {backend}, expected cudaMallocAsync (PYTORCH_CUDA_ALLOC_CONF)")
        return 1
    nbytes = int(quota_mib * factor) << 20
    x = torch.ones(1024, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as PyTorch's documentation asks
        (x * 2).sum()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            buf.fill_(7)
            total = buf[-4096:].sum()
        for _replay in range(3):
            graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:
        chain = error_chain(exc)
        print(f"capturing a graph of {nbytes >> 20} MiB ({factor} x {quota_mib} MiB): " + " <- ".join(chain))
        return 2 if is_oom(chain) else 1
    print(f"captured and replayed a graph of {nbytes >> 20} MiB ({factor} x {quota_mib} MiB): sum {int(total)}")
    if int(total) != 7 * 4096:
        print("the graph did not write its buffer")
        return 1

    extra = int(quota_mib * 0.6) << 20
    try:
        more = torch.empty(extra, dtype=torch.uint8, device="cuda")
        more.fill_(1)
        torch.cuda.synchronize()
    except Exception as exc:
        chain = error_chain(exc)
        if is_oom(chain):
            print(f"while the graph lives, a further {extra >> 20} MiB is refused: " + chain[0])
            del buf, graph
            return 0
        print("a further allocation failed otherwise: " + " <- ".join(chain))
        return 1
    print(f"a further {extra >> 20} MiB was allowed while the graph holds {nbytes >> 20} MiB: graph memory not counted")
    return 1


if __name__ == "__main__":
    sys.exit(main())
