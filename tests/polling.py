"""Waiting for a condition in every suite (tests/k8s, tests/node, tests/security and the component
tests): one poll loop whose timeout names what was awaited and, where asked, what was last seen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    what: str,
    check: Callable[[], T | None],
    timeout: float,
    interval: float = 0.5,
    *,
    seen: Callable[[], object] | None = None,
) -> T:
    """Poll check() until it returns something other than None/False; TimeoutError names `what`
    and, when `seen` is given, what seen() shows at the timeout (the state that was not `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            last = f" (last seen: {seen()})" if seen is not None else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{last}")
        time.sleep(interval)
