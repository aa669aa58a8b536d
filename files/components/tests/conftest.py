"""Shared set-up for the component tests.

The package is imported from ../src (it is not installed in the tool chain venv),
and the gRPC stubs are generated from the .proto files when they are missing.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
REPO = Path(__file__).resolve().parents[3]  # tests.polling, the suites' one wait helper
for _path in (SRC, REPO):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))


def pytest_configure(config: pytest.Config) -> None:
    importlib.import_module("vgpu_components.protos").generate()


# Fixtures shared with tests/security (component_fixtures.py; the peers in fakes.py need no pytest).
_fixtures = importlib.import_module("component_fixtures")
short_tmp, cluster, apiserver = _fixtures.short_tmp, _fixtures.cluster, _fixtures.apiserver
node = _fixtures.plugin_node  # the device plugin's tests
