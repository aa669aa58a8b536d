"""What an ansible-playbook run reports in its PLAY RECAP, for the suites that run playbooks
(tests/k8s, tests/node): how many tasks changed something on a host."""

from __future__ import annotations

import re


def changed_count(output: str, host: str = "localhost") -> int:
    """The changed= count of `host`'s recap line; fails, showing the output's end, without one."""
    match = re.search(rf"^{re.escape(host)}\s*:\s*ok=\d+\s+changed=(\d+)", output, re.MULTILINE)
    assert match, f"no play recap for {host} in:\n{output[-2000:]}"
    return int(match.group(1))
