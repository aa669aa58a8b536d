"""checkpoint.py: versioned, checksummed JSON written by fsync and rename (the DRA driver's claim
records; test_dra.py tests them through the driver)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vgpu_components import checkpoint


def test_what_is_written_reads_back_and_the_file_says_its_version_and_checksum(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    checkpoint.write(path, {"b": [1, 2], "a": "x"})
    assert checkpoint.read(path) == {"a": "x", "b": [1, 2]}
    doc = json.loads(path.read_text())
    assert doc["version"] == 1 and doc["checksum"].startswith("sha256:")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]  # no temporary file left


def test_a_failed_write_leaves_the_old_checkpoint_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.json"
    checkpoint.write(path, {"n": 1})

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.write(path, {"n": 2})
    monkeypatch.undo()
    assert checkpoint.read(path) == {"n": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["c.json"]


def test_a_plain_object_is_read_only_where_the_caller_accepts_it_as_legacy(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"uid": "u"}))
    assert checkpoint.read(path, legacy=lambda d: "uid" in d) == {"uid": "u"}
    with pytest.raises(checkpoint.CheckpointError, match="version None, expected 1"):
        checkpoint.read(path)


def test_a_missing_file_is_not_an_error_of_the_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        checkpoint.read(tmp_path / "absent.json")
