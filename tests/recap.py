"""What an ansible-playbook run reports in its PLAY RECAP, for the suites that run playbooks
(tests/k8s, tests/node): how many tasks changed something on a host."""

from __future__ import annotations

import re


def changed_count(output: str, host: str = "localhost") -> int:
    """The changed= count of `host`'s recap line; fails, showing the output's end, without one."""
    match = re.search(rf"^{re.escape(host)}\s*:\s*ok=\d+\s+changed=(\d+)", output, re.MULTILINE)
    assert match, f"no play recap for {host} in:\n{output[-2000:]}"
    return int(match.group(1))


def changed_tasks(output: str) -> list[str]:
    """The names of the tasks that reported a change (`changed: [...]` under their TASK line), so that a
    failing idempotence check names them."""
    tasks: list[str] = []
    task = ""
    for line in output.splitlines():
        header = re.match(r"^TASK \[(.*)\]", line)
        if header:
            task = header.group(1)
        elif line.startswith("changed:") and task and task not in tasks:
            tasks.append(task)
    return tasks
