"""files/components/image/oci_archive.py: the component image's OCI archive, written without Docker.

The archive is checked as containerd reads it (oci-layout, index.json and its annotations, blobs named
by their digests) and as `docker load` reads it (manifest.json); the layer is checked against the
root filesystem it was written from. Running the image is test_image.py's (docker-marked).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import io
import json
import os
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "image" / "oci_archive.py"
REF = "localhost/vgpu-components:9.8.7"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("oci_archive", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


oci = _module()


def _rootfs(root: Path) -> Path:
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc" / "hostname").write_text("node\n")
    tool = root / "usr" / "local" / "bin" / "tool"
    tool.write_text("#!/bin/sh\necho tool\n")
    tool.chmod(0o755)
    (root / "usr" / "local" / "bin" / "alias").symlink_to("tool")
    os.link(tool, root / "usr" / "local" / "bin" / "tool-copy")
    (root / "etc" / "shadow").write_text("root:*:1:0:99999:7:::\n")
    (root / "etc" / "shadow").chmod(0o640)
    return root


def _build(rootfs: Path, out: Path) -> None:
    args = [str(rootfs), str(out), "--ref", REF, "--env", "PATH=/usr/local/bin:/usr/bin", "--env", "A=b"]
    assert oci.main([*args, "--cmd", '["tool", "--help"]', "--label", "org.opencontainers.image.version=9.8.7"]) == 0


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() if m.isreg() else b"" for m in tar.getmembers()}  # type: ignore[union-attr]


def _blob(members: dict[str, bytes], descriptor: dict[str, Any]) -> bytes:
    return members["blobs/sha256/" + descriptor["digest"].split(":")[1]]


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    out = tmp_path / "out" / "image.tar"
    _build(_rootfs(tmp_path / "rootfs"), out)
    return out


def test_the_archive_is_an_oci_layout_whose_blobs_match_their_digests(archive: Path) -> None:
    members = _members(archive)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = [name for name in members if name.startswith("blobs/sha256/") and members[name]]
    assert len(blobs) == 3  # layer, config, manifest
    for name in blobs:
        assert hashlib.sha256(members[name]).hexdigest() == name.rsplit("/", 1)[1], name

    index = json.loads(members["index.json"])
    assert index["mediaType"] == "application/vnd.oci.image.index.v1+json"
    (entry,) = index["manifests"]
    # containerd 1.6 and 2.x name an imported image after io.containerd.image.name.
    assert entry["annotations"] == {"io.containerd.image.name": REF, "org.opencontainers.image.ref.name": "9.8.7"}
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest_bytes = _blob(members, entry)
    assert len(manifest_bytes) == entry["size"]
    manifest = json.loads(manifest_bytes)
    assert manifest["mediaType"] == entry["mediaType"] == "application/vnd.oci.image.manifest.v1+json"

    config_bytes = _blob(members, manifest["config"])
    assert len(config_bytes) == manifest["config"]["size"]
    config = json.loads(config_bytes)
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    layer_bytes = _blob(members, layer)
    assert len(layer_bytes) == layer["size"]
    diff_id = f"sha256:{hashlib.sha256(gzip.decompress(layer_bytes)).hexdigest()}"
    assert config["rootfs"] == {"type": "layers", "diff_ids": [diff_id]}
    assert config["config"] == {
        "Env": ["PATH=/usr/local/bin:/usr/bin", "A=b"],
        "Cmd": ["tool", "--help"],
        "Labels": {"org.opencontainers.image.version": "9.8.7"},
    }
    assert (config["architecture"], config["os"]) == ("amd64", "linux")


def test_docker_load_finds_the_same_config_and_layer(archive: Path) -> None:
    """Docker before 25 loads only what manifest.json names."""
    members = _members(archive)
    (entry,) = json.loads(members["manifest.json"])
    assert entry["RepoTags"] == [REF]
    manifest = json.loads(_blob(members, json.loads(members["index.json"])["manifests"][0]))
    assert entry["Config"] == "blobs/sha256/" + manifest["config"]["digest"].split(":")[1]
    assert entry["Layers"] == ["blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1]]


def test_the_layer_holds_the_root_filesystem_sorted_with_fixed_times(archive: Path) -> None:
    members = _members(archive)
    manifest = json.loads(_blob(members, json.loads(members["index.json"])["manifests"][0]))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(_blob(members, manifest["layers"][0])))) as layer:
        entries = {m.name: m for m in layer.getmembers()}
        names = [m.name for m in layer.getmembers()]
        assert names == [
            "etc",
            "etc/hostname",
            "etc/shadow",
            "usr",
            "usr/local",
            "usr/local/bin",
            "usr/local/bin/alias",
            "usr/local/bin/tool",
            "usr/local/bin/tool-copy",
        ]
        assert {m.mtime for m in entries.values()} == {0}
        assert {(m.uname, m.gname) for m in entries.values()} == {("", "")}
        assert entries["usr/local/bin/tool"].mode & 0o777 == 0o755
        assert entries["etc/shadow"].mode & 0o777 == 0o640
        assert entries["usr/local/bin/alias"].issym() and entries["usr/local/bin/alias"].linkname == "tool"
        copy = entries["usr/local/bin/tool-copy"]
        assert copy.islnk() and copy.linkname == "usr/local/bin/tool"
        assert layer.extractfile("usr/local/bin/tool").read() == b"#!/bin/sh\necho tool\n"  # type: ignore[union-attr]


def test_the_same_root_filesystem_gives_the_same_archive(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path / "rootfs")
    _build(rootfs, tmp_path / "first.tar")
    for path in rootfs.rglob("*"):
        os.utime(path, (1_800_000_000, 1_800_000_000), follow_symlinks=False)
    _build(rootfs, tmp_path / "second.tar")
    first, second = (hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("first.tar", "second.tar"))
    assert first == second
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob("*.layer"))


def test_a_build_leaves_another_builds_work_files_alone(tmp_path: Path) -> None:
    """Two builds of one archive at once (two pytest workers whose image fixture found it stale)
    shared the fixed work files <out>.layer and <out>.tmp: each overwrote and removed the other's,
    and a truncated archive was renamed into place, which `docker load` then refused ("unexpected
    EOF") and later runs took as fresh. Each build's work files are its own now."""
    out = tmp_path / "image.tar"
    others = {out.with_name("image.tar.layer"): b"the other build's layer", out.with_name("image.tar.tmp"): b"its tar"}
    for path, data in others.items():
        path.write_bytes(data)
    _build(_rootfs(tmp_path / "rootfs"), out)
    assert {path: path.read_bytes() for path in others} == others
    assert "index.json" in _members(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["image.tar", "image.tar.layer", "image.tar.tmp", "rootfs"]


def test_a_changed_file_changes_the_digest(tmp_path: Path) -> None:
    rootfs = _rootfs(tmp_path / "rootfs")
    _build(rootfs, tmp_path / "first.tar")
    (rootfs / "etc" / "hostname").write_text("other\n")
    _build(rootfs, tmp_path / "second.tar")
    first, second = (json.loads(_members(tmp_path / n)["index.json"]) for n in ("first.tar", "second.tar"))
    assert first["manifests"][0]["digest"] != second["manifests"][0]["digest"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ref", "localhost/vgpu-components"], "--ref 'localhost/vgpu-components': expected NAME:TAG"),
        (["--ref", "a:1", "--env", "NOEQUALS"], "--env 'NOEQUALS': expected KEY=VALUE"),
        (["--ref", "a:1", "--cmd", '"tool"'], "--cmd '\"tool\"': expected a JSON list of strings"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, args: list[str], message: str) -> None:
    rootfs = _rootfs(tmp_path / "rootfs")
    with pytest.raises(SystemExit) as raised:
        oci.main([str(rootfs), str(tmp_path / "out.tar"), *args])
    assert message in str(raised.value)
    assert not (tmp_path / "out.tar").exists()


def test_a_missing_root_filesystem_is_named(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"nowhere: not a folder \(expected the root filesystem to pack\)"):
        oci.main([str(tmp_path / "nowhere"), str(tmp_path / "out.tar"), "--ref", "a:1"])


def test_an_uncompressed_copy_is_the_same_image_with_plain_tar_layers(tmp_path: Path) -> None:
    """tests/gpu/kubelet/pack.sh carries the image through a transport of limited size: xz shrinks
    a plain-tar layer far better than an already gzipped one."""
    _build(_rootfs(tmp_path / "root"), tmp_path / "image.tar")
    oci.uncompressed_copy(tmp_path / "image.tar", tmp_path / "plain.tar")
    before, after = _members(tmp_path / "image.tar"), _members(tmp_path / "plain.tar")
    for name, data in after.items():
        if name.startswith("blobs/sha256/") and data:
            assert hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[1]
    index = json.loads(after["index.json"])
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == REF
    manifest = json.loads(after["blobs/sha256/" + index["manifests"][0]["digest"].split(":")[1]])
    [layer] = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    plain = after["blobs/sha256/" + layer["digest"].split(":")[1]]
    config = json.loads(after["blobs/sha256/" + manifest["config"]["digest"].split(":")[1]])
    assert config["rootfs"]["diff_ids"] == [layer["digest"]]  # the same filesystem, the same diff_id
    old_manifest = json.loads(before["blobs/sha256/" + json.loads(before["index.json"])["manifests"][0]["digest"][7:]])
    assert gzip.decompress(before["blobs/sha256/" + old_manifest["layers"][0]["digest"][7:]]) == plain
    [docker] = json.loads(after["manifest.json"])
    assert docker["Layers"] == ["blobs/sha256/" + layer["digest"].split(":")[1]]
