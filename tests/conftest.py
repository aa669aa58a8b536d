"""Make `ansible_collections.vgpu.isolation` importable from this checkout for plain pytest runs.

ansible-test units does this itself; `make unit` runs pytest from the repo root, so we point an
`ansible_collections/vgpu/isolation` link at the checkout under build/ and put it on sys.path.
"""

import os
import sys
from pathlib import Path

# gRPC's fork handlers, on by default in its wheels, run in every child forked in a process that
# has loaded gRPC and crash some of them (SIGSEGV while another thread polls: 12 and 20 of 240 forks in
# two measurements). The unit run loads the components' gRPC tests and Ansible's run_command, which
# forks, into the same worker; nothing here forks a child that uses gRPC. Before any import of it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

ROOT = Path(__file__).resolve().parents[1]
_TREE = ROOT / "build" / "pytest-collections"
_LINK = _TREE / "ansible_collections" / "vgpu" / "isolation"

if "ansible_collections.vgpu.isolation" not in sys.modules and ROOT.parent.parent.name != "ansible_collections":
    _LINK.parent.mkdir(parents=True, exist_ok=True)
    if not _LINK.is_symlink():
        _LINK.symlink_to(ROOT, target_is_directory=True)
    sys.path.insert(0, str(_TREE))
# The helpers the suites share (role_render.py, tests.polling) are on the path by pytest's
# configuration (pyproject.toml, pythonpath).
