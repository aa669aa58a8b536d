"""The security regression layer (`make security`): one test per finding of the adversarial
review (issue 12), each written to fail before its fix. Tests of the components use the
components' package and test peers (files/components/src and files/components/tests/fakes.py).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT / "files" / "components" / "src", ROOT / "files" / "components" / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))


def pytest_configure(config: pytest.Config) -> None:
    importlib.import_module("vgpu_components.protos").generate()


_fixtures = importlib.import_module("component_fixtures")
short_tmp, cluster, apiserver = _fixtures.short_tmp, _fixtures.cluster, _fixtures.apiserver
