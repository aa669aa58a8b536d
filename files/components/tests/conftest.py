"""Shared set-up for the component tests.

The package is the installed one (the Makefile installs files/components into the venv, editable);
the gRPC stubs are generated from the .proto files when they are missing. The test helpers (this
folder, and the repository root for tests.polling) are on the path by pytest's configuration.
"""

from __future__ import annotations

import importlib
import os

import pytest

# gRPC's fork handlers, on by default in its wheels, run in every child forked in a process that
# has loaded gRPC and crash some of them (SIGSEGV while another thread polls: 12 and 20 of 240 forks in
# two measurements). The unit run loads the components' gRPC tests and Ansible's run_command, which
# forks, into the same worker; nothing here forks a child that uses gRPC. Before any import of it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def pytest_configure(config: pytest.Config) -> None:
    importlib.import_module("vgpu_components.protos").generate()


# Fixtures shared with tests/security (component_fixtures.py; the peers in fakes.py need no pytest).
_fixtures = importlib.import_module("component_fixtures")
short_tmp, cluster, apiserver = _fixtures.short_tmp, _fixtures.cluster, _fixtures.apiserver
node = _fixtures.plugin_node  # the device plugin's tests
