"""Fixtures of the e2e site suite: those of the e2e node suite (a namespace per test), on the site's
control plane (tests/site/run-e2e.sh sets VGPU_E2E_NODE to it)."""

from tests.node.conftest import namespace

__all__ = ["namespace"]
