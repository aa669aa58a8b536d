"""Shared set-up for the component tests.

The package is imported from ../src (it is not installed in the tool chain venv),
and the gRPC stubs are generated from the .proto files when they are missing.
"""

from __future__ import annotations

import importlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))


def pytest_configure(config: pytest.Config) -> None:
    importlib.import_module("vgpu_components.protos").generate()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short folder path: unix socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="vgpu") as tmp:
        yield Path(tmp)
