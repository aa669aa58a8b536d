"""NVIDIA's container toolkit (nvidia-ctk, nvidia-container-runtime) built from the pinned sources, for
the tests that run it for real: the runtime role's settings and the runtime's choice of a
container's devices need no GPU in its cdi mode with a static CDI specification.

The offline bundle's build (files/bundle/build-binaries.sh) leaves them in the cache; otherwise they
are built here once, from the same module (files/bundle/upstream/nvidia-container-toolkit), with Go's
build cache, into build/toolkit-test.
"""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "files" / "bundle" / "upstream" / "nvidia-container-toolkit"
COMMANDS = ("nvidia-ctk", "nvidia-container-runtime")


def _version() -> str:
    for line in (ROOT / "files" / "bundle" / "versions.env").read_text().splitlines():
        if line.startswith("TOOLKIT_VERSION="):
            return line.split("=", 1)[1]
    raise AssertionError("files/bundle/versions.env names no TOOLKIT_VERSION")


def folder() -> Path:
    """The folder holding nvidia-ctk and nvidia-container-runtime; builds them when needed."""
    cache = Path(os.environ.get("VGPU_CACHE_DIR", Path.home() / ".cache" / "vgpu-isolation"))
    bundled = cache / "k8s" / f"nvidia-container-toolkit-{_version()}"
    if all((bundled / name).is_file() for name in COMMANDS):
        return bundled
    key = hashlib.sha256((MODULE / "go.sum").read_bytes() + (MODULE / "go.mod").read_bytes()).hexdigest()[:16]
    out = ROOT / "build" / "toolkit-test" / key
    if all((out / name).is_file() for name in COMMANDS):
        return out
    go = shutil.which("go")
    assert go, "the toolkit tests build NVIDIA's container toolkit from its pinned Go sources: put go on PATH"
    out.mkdir(parents=True, exist_ok=True)
    packages = [f"github.com/NVIDIA/nvidia-container-toolkit/cmd/{name}" for name in COMMANDS]
    result = subprocess.run(
        [go, "build", "-trimpath", "-o", str(out) + "/", *packages],
        cwd=MODULE,
        env=dict(os.environ, CGO_ENABLED="1"),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out
