"""Fixtures shared by the component tests and tests/security (their conftests import them)."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import PluginNode, RecordingApiServer, Scheduler, extender_cluster
from kubernetes import client as k8s


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short folder path: unix socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="vgpu") as tmp:
        yield Path(tmp)


@pytest.fixture(name="node")
def plugin_node(short_tmp: Path) -> Iterator[PluginNode]:
    """A device plugin and its kubelet (fakes.PluginNode); Xid recovery and PodResources polls short."""
    n = PluginNode(short_tmp, xid_recovery_s=0.6, pod_resources_poll_s=0.1)
    yield n
    n.stop()


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> Iterator[Scheduler]:
    with extender_cluster(getattr(request, "param", "tightest")) as scheduler:
        yield scheduler


@pytest.fixture
def apiserver() -> Iterator[tuple[RecordingApiServer, Any]]:
    server = RecordingApiServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    configuration = k8s.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield server, k8s.ApiClient(configuration)
    server.shutdown()
    server.server_close()
