"""Fixtures for the end-to-end suite: an API client, a namespace and simulated GPU nodes per test.

Run through `make -C tests/k8s test`, which starts the control plane first and stops it after.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.k8s import cluster


@pytest.fixture(scope="session")
def core() -> Any:
    api = client.CoreV1Api(cluster.api_client())
    # Fails (not skips) when the control plane is not up: the suite is meaningless without it.
    api.list_namespace(limit=1, _request_timeout=10)
    return api


@pytest.fixture
def namespace(core: Any) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    cluster.wait_for(
        f"the default service account of {name}",
        lambda: any(sa.metadata.name == "default" for sa in core.list_namespaced_service_account(name).items),
        timeout=60,
    )
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)


@pytest.fixture
def gpu_nodes(core: Any) -> Iterator[cluster.NodeFactory]:
    """make(count, gpus_mib=[12288, 12288]) -> node selector of `count` new Ready GPU nodes."""
    created: list[str] = []

    def make(count: int, gpus_mib: list[int] | None = None) -> dict[str, str]:
        group = uuid.uuid4().hex[:8]
        names = [f"gpu-{group}-{i}" for i in range(count)]
        for name in names:
            gpus = gpus_mib if gpus_mib is not None else [cluster.GPU_12GIB, cluster.GPU_12GIB]
            core.create_node(cluster.node_body(name, gpus, {cluster.GROUP_LABEL: group}))
            created.append(name)
        cluster.wait_for(
            f"nodes {names} Ready (kwok)",
            lambda: all(cluster.node_ready(core.read_node(n)) for n in names),
            timeout=60,
        )
        return {cluster.GROUP_LABEL: group}

    yield make
    for name in created:
        core.delete_node(name)


@pytest.fixture
def extender_back_up() -> Iterator[None]:
    """For tests that stop the extender: make sure it runs again for the tests after them."""
    yield
    if not (cluster.STATE_DIR / "pids" / "extender.pid").exists():
        cluster.ctl("start-extender")
