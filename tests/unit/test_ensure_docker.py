"""tests/harness/ensure-docker.sh under the shared lock: the dockerd it starts must not keep the lock.

The container layers run as `flock /work/heavy.lock make ...`; flock hands its locked descriptor to
the command, and a dockerd started from there inherited it, so the lock stayed held for as long as
dockerd ran and every later `flock` waited for ever (seen on 2026-12-02). A stand-in dockerd and
docker (on PATH before the real ones: starting a real engine is not something a unit test may do)
record what the started daemon holds.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_DOCKERD = """#!/bin/sh
echo $$ > "$FAKE_STATE/dockerd.pid"
for fd in /proc/$$/fd/*; do readlink "$fd"; done > "$FAKE_STATE/dockerd.fds"
touch "$FAKE_STATE/up"
exec sleep 60
"""
FAKE_DOCKER = """#!/bin/sh
[ "$1" = info ] && [ -e "$FAKE_STATE/up" ]
"""


def test_the_started_dockerd_does_not_hold_the_callers_lock(tmp_path):
    fakes = tmp_path / "bin"
    fakes.mkdir()
    for name, text in {"dockerd": FAKE_DOCKERD, "docker": FAKE_DOCKER}.items():
        (fakes / name).write_text(text)
        (fakes / name).chmod(0o755)
    lock = tmp_path / "heavy.lock"
    env = dict(
        os.environ,
        PATH=f"{fakes}:{os.environ['PATH']}",
        FAKE_STATE=str(tmp_path),
        VGPU_DOCKERD_LOG=str(tmp_path / "dockerd.log"),
    )
    try:
        subprocess.run(
            ["flock", str(lock), str(ROOT / "tests" / "harness" / "ensure-docker.sh")],
            env=env,
            check=True,
            timeout=60,
            capture_output=True,
        )
        assert (tmp_path / "up").exists()
        assert str(lock) not in (tmp_path / "dockerd.fds").read_text().split()
        # The lock is free again while the daemon runs on.
        assert subprocess.run(["flock", "--nonblock", str(lock), "true"], check=False).returncode == 0
    finally:
        pid = tmp_path / "dockerd.pid"
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGTERM)
