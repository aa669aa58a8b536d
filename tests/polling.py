"""Waiting for a condition in the end-to-end suites (tests/k8s, tests/node): one poll loop whose
timeout names what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    """Poll check() until it returns something other than None/False; TimeoutError names `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
