"""Issue 28 finding 3: a container's MPS compute share and pinned device-memory limit were only
variables of its own environment (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT):
a tenant that unset the limit and asked 100 % got the whole GPU's SMs, and every container's
clients reached the one MPS control daemon of the node.

Both limits must be the defaults of an MPS daemon of the container's own allocation, which the
container reaches only through its own pipe folder, read-only; nothing of them in its
environment. The device plugin runs against a real gRPC kubelet peer and nvidia-mps's manager
against the stand-in control daemon of the component tests (a real Unix socket peer; no MPS
binaries here). That a daemon's defaults bind a client asking for more is measured on the H200:
tests/gpu/compute_share.sh.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import PluginNode, allocate, mps_ask, two_gpus
from vgpu_components import ids, mps_requests

KEY0 = hashlib.sha256(two_gpus()[0].uuid.encode()).hexdigest()[:6]
CORES = "vgpu.io/gpu-cores"


@pytest.fixture
def node(short_tmp: Path) -> Iterator[PluginNode]:
    n = PluginNode(short_tmp, mps_enabled=True, compute_shares=True)
    yield n
    n.stop()


def test_a_containers_share_and_memory_limit_are_its_own_daemons_and_out_of_its_reach(node: PluginNode) -> None:
    node.kubelet.wait_stream(CORES, 1)
    pipe_root = node.cfg["mps"]["pipe_dir"]
    tenants = {}
    for name, first, units, share in (("small", 0, 30, 25), ("big", 30, 20, 75)):
        memory = [f"{KEY0}-{n}" for n in range(first, first + units)]
        cores = [f"cores-{n}" for n in range(first, first + share)]
        got = allocate(node, memory).container_responses[0]
        share_answer = allocate(node, cores, CORES).container_responses[0]
        envs = {**dict(got.envs), **dict(share_answer.envs)}
        mounts = [(m.container_path, m.host_path, m.read_only) for m in [*got.mounts, *share_answer.mounts]]
        tenants[name] = (memory, envs, mounts)

    for name, share, quota in (("small", 25, 3000), ("big", 75, 2000)):
        memory, envs, mounts = tenants[name]
        # Nothing the tenant could unset or raise is in its environment.
        assert {k for k in envs if k.startswith("CUDA_MPS")} == {"CUDA_MPS_PIPE_DIRECTORY"}, envs
        # Its own daemon's folder, read-only, and no other.
        own = mps_requests.pipe_folder(pipe_root, ids.alloc_id(memory))
        assert [m for m in mounts if m[1].startswith(pipe_root)] == [(pipe_root, str(own), True)]
        assert mps_ask(own, "get_default_active_thread_percentage") == f"{share}.0"
        assert mps_ask(own, "exact_default_device_pinned_mem_limit 0") == f"{quota}M"
