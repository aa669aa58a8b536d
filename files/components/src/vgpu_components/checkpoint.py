"""Crash-safe JSON checkpoints: versioned, checksummed, written by fsync and rename.

A checkpoint file is {"version": 1, "checksum": "sha256:<hex>", "data": {...}}, the checksum taken
over the canonical JSON of "data" (sorted keys, no spaces), as kubelet's own checkpoints do. A
write goes to a temporary file in the same folder, is flushed to disk, renamed over the old one
and the folder flushed too, so a crash or a full disk leaves either the old or the new file whole,
never a mix. A file that is cut short, changed by hand or of another version is refused with its
path and what to do: a component must not act on state it cannot trust.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted; the message names it and says what to do."""


def _canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def checksum(data: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(_canonical(data)).hexdigest()


def write(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    """Replace `path` with a checkpoint of `data`, atomically and durably."""
    body = json.dumps({"version": VERSION, "checksum": checksum(data), "data": data}, sort_keys=True).encode()
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read(path: Path, legacy: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The data of the checkpoint at `path` (FileNotFoundError when there is none).

    `legacy` accepts a plain JSON object written before checkpoints were versioned, so that state
    left by the previous release is still read after an upgrade (it is rewritten as a checkpoint at
    the next write).
    """
    raw = path.read_bytes()
    fix = "remove it only once what it describes has been cleaned up by hand (docs/operations.md)"
    try:
        doc = json.loads(raw)
    except ValueError:
        raise CheckpointError(f"{path} is not a complete checkpoint (cut short or not JSON): {fix}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{path} is not a checkpoint (expected a JSON object): {fix}")
    if "version" not in doc and legacy is not None and legacy(doc):
        return doc
    if doc.get("version") != VERSION:
        raise CheckpointError(
            f"{path} has checkpoint version {doc.get('version')!r}, expected {VERSION}: it was written by "
            f"another release of this component; run that release to clean it up, or {fix}"
        )
    data = doc.get("data")
    if not isinstance(data, dict) or doc.get("checksum") != checksum(data):
        raise CheckpointError(f"{path} fails its checksum: it was changed or damaged after it was written; {fix}")
    return data
