"""Fixtures shared by the component tests and tests/security (their conftests import them)."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingApiServer, Scheduler, extender_cluster
from kubernetes import client as k8s


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short folder path: unix socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="vgpu") as tmp:
        yield Path(tmp)


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
