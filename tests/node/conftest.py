"""Fixtures of the e2e node suite: a namespace per test, removed with its pods afterwards.

Run through `make e2e-node` (tests/node/run-e2e.sh), which provisions the node with
playbooks/site.yml first; the tests fail, not skip, when there is no cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.node import node


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    node.kubectl("create", "namespace", name)
    node.wait_for(
        f"the default service account of {name}",
        lambda: "default" in node.kubectl("get", "serviceaccount", "-n", name, "-o", "name"),
        timeout=60,
    )
    yield name
    node.kubectl("delete", "namespace", name, "--wait=true", "--timeout=120s", check=False, timeout=150)
