"""Put the component tests' peers (files/components/tests: fakes, component_fixtures), which are no
package, and the repository root (tests.polling) on sys.path for the bench scripts, and generate the
gRPC stubs. The components themselves are the installed package (the Makefile installs
files/components into the venv)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "files" / "components" / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
importlib.import_module("vgpu_components.protos").generate()
