"""The DRA driver's records of what it prepared, one checkpoint per claim UID under <state_dir>/dra/:
kubelet may unprepare a claim the API server no longer has, and a second prepare of the same claim
must find the same folders."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from vgpu_components import checkpoint
from vgpu_components.dra import PrepareError

log = logging.getLogger("vgpu.dra_driver")


class ClaimRecords:
    """What the driver prepared, one checkpoint per claim UID under <state_dir>/dra/ (checkpoint.py:
    versioned, checksummed, written by fsync and rename). A record that cannot be trusted is
    refused with its path: prepare and unprepare must not act on it."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.folder = Path(state_dir) / "dra"

    def _path(self, uid: str) -> Path:
        if not uid or "/" in uid or uid.startswith("."):
            raise PrepareError(f"claim UID {uid!r} is not a UID")
        return self.folder / f"{uid}.json"

    @staticmethod
    def _legacy(doc: dict[str, Any]) -> bool:
        """A plain record of the releases before checkpoints (read, and rewritten at the next save)."""
        return "uid" in doc and "devices" in doc

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            return checkpoint.read(path, legacy=self._legacy)
        except checkpoint.CheckpointError as exc:
            raise PrepareError(f"the driver's record of this claim cannot be trusted: {exc}") from None

    def load(self, uid: str) -> dict[str, Any] | None:
        try:
            return self._read(self._path(uid))
        except FileNotFoundError:
            return None

    def save(self, uid: str, doc: dict[str, Any]) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        checkpoint.write(self._path(uid), doc)

    def delete(self, uid: str) -> None:
        self._path(uid).unlink(missing_ok=True)

    def all(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            try:
                out.append(self._read(path))
            except PrepareError as exc:
                log.error("%s", exc)
            except OSError as exc:
                log.error("cannot read the driver's record %s: %s", path, exc)
        return out
