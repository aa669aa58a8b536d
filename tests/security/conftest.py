"""The security regression layer (`make security`): one test per finding of the adversarial
review (issue 12), each written to fail before its fix. Tests of the components run with the
component tests' own set-up (files/components/tests/conftest.py: the gRPC stubs, the shared
fixtures), loaded here as it is; the installed package and the test peers (pytest's pythonpath).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

COMPONENT_TESTS = Path(__file__).resolve().parents[2] / "files" / "components" / "tests"
_spec = importlib.util.spec_from_file_location("component_conftest", COMPONENT_TESTS / "conftest.py")
assert _spec is not None and _spec.loader is not None
_components = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_components)

pytest_configure = _components.pytest_configure
short_tmp, cluster, apiserver = _components.short_tmp, _components.cluster, _components.apiserver
