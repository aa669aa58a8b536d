"""Put the components package and the component test helpers on sys.path for the bench scripts."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# ROOT for tests.polling, the wait helper the test fakes use.
for path in (ROOT, ROOT / "files" / "components" / "src", ROOT / "files" / "components" / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
importlib.import_module("vgpu_components.protos").generate()
