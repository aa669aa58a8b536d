"""What one request at the extender's body cap costs: peak memory and time, per body shape.

Each case starts a fresh extender process (its HTTP layer and verbs, with a model of --nodes nodes
x 8 GPUs), records its resident memory, POSTs one body to /filter over HTTP, and reads the
process's peak resident memory (VmHWM) afterwards. The bodies are at the cap (extender_http.MAX_BODY,
5 MiB): the largest legitimate ExtenderArgs of a 5000-node cluster, and shapes chosen to make
Python's JSON decoder build as many objects per byte as it can. The baseline is the same
process's memory before the request.

    .venv/bin/python bench/extender_limits.py [--nodes 1000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import _components_path
from extender_latency import pod
from vgpu_components.extender_http import MAX_BODY

MIB = 1024 * 1024

SERVER = """
import json, sys
sys.path[:0] = [{bench!r}]  # extender_latency; vgpu_components is installed
from extender_latency import build_model
from vgpu_components.extender_verbs import Extender
from vgpu_components.extender_http import ExtenderServer
server = ExtenderServer("127.0.0.1", 0, Extender(build_model({nodes}, 8)))
print(server.server_address[1], flush=True)
server.serve_forever()
"""


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def fill(prefix: bytes, item: bytes, suffix: bytes, size: int) -> bytes:
    """prefix + item, item, ... + suffix, as close to `size` bytes as the items allow."""
    count = (size - len(prefix) - len(suffix)) // (len(item) + 1)
    return prefix + b",".join([item] * count) + suffix


def cases() -> dict[str, Callable[[], bytes]]:
    pod_json = json.dumps(pod(3000)).encode()
    names = [f"{'n' * 248}-{i:04d}" for i in range(5000)]  # 253-byte node names, the longest allowed
    largest = json.dumps({"Pod": pod(3000), "Nodes": None, "NodeNames": names}).encode()
    return {
        "5000 NodeNames of 253 bytes (the largest real ExtenderArgs but for the pod)": lambda: largest,
        "empty objects [{},{},...]": lambda: fill(b'{"Pod":' + pod_json + b',"NodeNames":[', b"{}", b"]}", MAX_BODY),
        "empty lists [[],[],...]": lambda: fill(b'{"Pod":' + pod_json + b',"NodeNames":[', b"[]", b"]}", MAX_BODY),
        "one-byte strings": lambda: fill(b'{"Pod":' + pod_json + b',"NodeNames":[', b'"a"', b"]}", MAX_BODY),
        "nested 2.6 million deep": lambda: b"[" * (MAX_BODY // 2) + b"]" * (MAX_BODY // 2),
        "over the cap by one byte": lambda: b" " * (MAX_BODY + 1),
    }


def run_case(name: str, body: bytes, nodes: int) -> dict[str, object]:
    code = SERVER.format(bench=str(Path(__file__).parent), nodes=nodes)
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        time.sleep(0.5)
        before = status_kib(server.pid, "VmRSS")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        started = time.perf_counter()
        if len(body) > MAX_BODY:  # the server answers from the head alone, then closes
            conn.putrequest("POST", "/filter")
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders()
        else:
            conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = response.read()
        elapsed = time.perf_counter() - started
        peak = status_kib(server.pid, "VmHWM")
        return {
            "case": name,
            "body_bytes": len(body),
            "status": response.status,
            "answer": answer[:80].decode(errors="replace"),
            "ms": round(elapsed * 1000, 1),
            "rss_before_mib": round(before / 1024, 1),
            "peak_mib": round(peak / 1024, 1),
            "growth_mib": round((peak - before) / 1024, 1),
        }
    finally:
        server.terminate()
        server.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="nodes in the extender's model (8 GPUs each)")
    args = parser.parse_args()
    print(
        json.dumps(
            {
                "src": str(_components_path.ROOT),
                "max_body": MAX_BODY,
                "nodes": args.nodes,
                "python": sys.version.split()[0],
                "cpus": os.cpu_count(),
            }
        )
    )
    for name, make in cases().items():
        print(json.dumps(run_case(name, make(), args.nodes)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
