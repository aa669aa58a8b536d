"""Write a root filesystem as a one-layer OCI image archive, with the standard library alone.

Usage: oci_archive.py ROOTFS OUT_TAR --ref NAME:TAG [--env K=V]... [--cmd JSON] [--label K=V]...

The archive is an OCI image layout (oci-layout, index.json, blobs/sha256/...) with one gzip layer,
the image configuration and its manifest; `ctr -n k8s.io images import` and `k3s ctr images import`
name the image after index.json's io.containerd.image.name annotation (containerd 1.6 and 2.x;
org.opencontainers.image.ref.name carries the tag alone, as `docker save` writes it). A
Docker-compatible manifest.json rides along so that `docker load` of Docker 20.10 and later reads
it too (containerd prefers the OCI layout when oci-layout is present).

Reproducible: entries sorted by name, every mtime fixed (SOURCE_DATE_EPOCH, default 0), owners
numeric, the gzip header without name or time, so the same root filesystem gives the same digests.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
CHUNK = 1 << 20


def _walk(root: Path) -> Iterator[Path]:
    """Every path under root, depth first, each folder's entries sorted by name."""
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        path = Path(entry.path)
        yield path
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(path)


def _entry(archive: tarfile.TarFile, root: Path, path: Path, mtime: int) -> tarfile.TarInfo:
    info = archive.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
    if info is None:  # a socket: nothing a container could use
        raise SystemExit(f"{path}: a socket in the root filesystem; remove it before packing")
    info.mtime = mtime
    info.uname = info.gname = ""
    return info


class _Writer(Protocol):
    def write(self, data: Any, /) -> int: ...


class _Digesting(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to `out`."""

    def __init__(self, out: _Writer) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.sha.update(view)
        self.size += len(view)
        self.out.write(view)
        return len(view)


def write_layer(root: Path, out: BinaryIO, mtime: int = 0) -> tuple[str, str, int]:
    """Write root as a gzip tar layer to out; (diff_id, digest, size) of the layer."""
    compressed = _Digesting(out)
    with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, mtime=mtime, compresslevel=6) as gz:
        plain = _Digesting(gz)
        with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as archive:
            for path in _walk(root):
                info = _entry(archive, root, path, mtime)
                if info.isreg():
                    with path.open("rb") as handle:
                        archive.addfile(info, handle)
                else:
                    archive.addfile(info)
    return f"sha256:{plain.sha.hexdigest()}", f"sha256:{compressed.sha.hexdigest()}", compressed.size


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(blob).hexdigest()}", "size": len(blob)}


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), mtime, 0o644
    archive.addfile(info, io.BytesIO(data))


def write_archive(
    root: Path,
    out_path: Path,
    *,
    ref: str,
    env: list[str],
    cmd: list[str],
    labels: dict[str, str],
    mtime: int = 0,
) -> dict[str, Any]:
    """Write the OCI image archive of root to out_path; the index.json it holds."""
    if ":" not in ref.rsplit("/", 1)[-1]:
        raise ValueError(f"--ref {ref!r}: expected NAME:TAG, e.g. localhost/vgpu-components:0.1.0")
    tag = ref.rsplit(":", 1)[1]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # Work files of this build's own (two builds at once must not share them), beside the archive
    # so that the finished one is renamed into place whole.
    work = f"{out_path.name}.{os.getpid()}.{threading.get_ident()}"
    layer_tmp = out_path.with_name(work + ".layer")
    with layer_tmp.open("wb") as layer_out:
        diff_id, layer_digest, layer_size = write_layer(root, layer_out, mtime)
    created = "1970-01-01T00:00:00Z" if mtime == 0 else _rfc3339(mtime)
    config = _json(
        {
            "architecture": "amd64",
            "os": "linux",
            "created": created,
            "config": {"Env": env, "Cmd": cmd, "Labels": labels},
            "rootfs": {"type": "layers", "diff_ids": [diff_id]},
            "history": [{"created": created, "created_by": "files/components/image/oci_archive.py"}],
        }
    )
    layer = {"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": layer_size}
    config_desc = _descriptor(MEDIA_CONFIG, config)
    manifest = _json({"schemaVersion": 2, "mediaType": MEDIA_MANIFEST, "config": config_desc, "layers": [layer]})
    manifest_desc = _descriptor(MEDIA_MANIFEST, manifest)
    manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
    manifest_desc["annotations"] = {"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag}
    index = {"schemaVersion": 2, "mediaType": MEDIA_INDEX, "manifests": [manifest_desc]}
    blob = "blobs/sha256/"
    docker_manifest = [
        {
            "Config": blob + config_desc["digest"].split(":")[1],
            "RepoTags": [ref],
            "Layers": [blob + layer_digest.split(":")[1]],
        }
    ]
    tmp = out_path.with_name(work + ".tmp")
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as archive:
            for folder in ("blobs/", "blobs/sha256/"):
                info = tarfile.TarInfo(folder)
                info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
                archive.addfile(info)
            blobs = {
                layer_digest: None,
                config_desc["digest"]: config,
                manifest_desc["digest"]: manifest,
            }
            for digest, data in sorted(blobs.items()):
                name = blob + digest.split(":")[1]
                if data is None:
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime, info.mode = layer_size, mtime, 0o644
                    with layer_tmp.open("rb") as handle:
                        archive.addfile(info, handle)
                else:
                    _add_bytes(archive, name, data, mtime)
            _add_bytes(archive, "index.json", _json(index), mtime)
            _add_bytes(archive, "manifest.json", _json(docker_manifest), mtime)
            _add_bytes(archive, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), mtime)
        tmp.replace(out_path)
    finally:
        layer_tmp.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return index


MEDIA_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"


def _read(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = archive.extractfile(member)
    if handle is None:
        raise ValueError(f"{member.name} in the archive is not a file")
    return handle.read()


def uncompressed_copy(src: Path, dst: Path) -> None:
    """Write a copy of the archive src whose layers are plain tar instead of gzip: larger on disk,
    but a general compressor (xz) then shrinks it by a third more than gzip did, which is what a
    transport of limited size wants (tests/gpu/kubelet/pack.sh). Same image: the config and its
    diff_ids are unchanged, only the layer descriptors, the manifest and the index change."""
    with tarfile.open(src) as archive:
        files = {m.name: _read(archive, m) for m in archive.getmembers() if m.isfile()}
    index = json.loads(files["index.json"])
    blob = "blobs/sha256/"
    renamed: dict[str, str] = {}
    for entry in index["manifests"]:
        manifest = json.loads(files.pop(blob + entry["digest"].split(":")[1]))
        for layer in manifest["layers"]:
            if layer["mediaType"] != MEDIA_LAYER:
                continue
            old = blob + layer["digest"].split(":")[1]
            plain = gzip.decompress(files.pop(old))
            desc = _descriptor(MEDIA_LAYER_TAR, plain)
            files[blob + desc["digest"].split(":")[1]] = plain
            renamed[old] = blob + desc["digest"].split(":")[1]
            layer.update(desc)
        data = _json(manifest)
        entry.update(_descriptor(MEDIA_MANIFEST, data))
        files[blob + entry["digest"].split(":")[1]] = data
    files["index.json"] = _json(index)
    if "manifest.json" in files:
        docker = json.loads(files["manifest.json"])
        for image in docker:
            image["Layers"] = [renamed.get(name, name) for name in image["Layers"]]
        files["manifest.json"] = _json(docker)
    tmp = dst.with_name(f"{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp")  # this copy's own
    try:
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as out:
            for folder in ("blobs/", "blobs/sha256/"):
                info = tarfile.TarInfo(folder)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                out.addfile(info)
            for name in sorted(files):
                _add_bytes(out, name, files[name], 0)
        tmp.replace(dst)
    finally:
        tmp.unlink(missing_ok=True)


def _rfc3339(seconds: int) -> str:
    import datetime  # noqa: PLC0415  (only for a non-zero SOURCE_DATE_EPOCH)

    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pairs(values: list[str], what: str) -> dict[str, str]:
    pairs = {}
    for value in values:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise SystemExit(f"{what} {value!r}: expected KEY=VALUE")
        pairs[key] = val
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0] if __doc__ else None)
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--ref", required=True, help="NAME:TAG the image is imported as")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE (repeatable)")
    parser.add_argument("--cmd", default="[]", help="the default command, a JSON list")
    parser.add_argument("--label", action="append", default=[], help="KEY=VALUE (repeatable)")
    args = parser.parse_args(argv)
    if not args.rootfs.is_dir():
        raise SystemExit(f"{args.rootfs}: not a folder (expected the root filesystem to pack)")
    cmd = json.loads(args.cmd)
    if not isinstance(cmd, list) or not all(isinstance(c, str) for c in cmd):
        raise SystemExit(f"--cmd {args.cmd!r}: expected a JSON list of strings")
    _pairs(args.env, "--env")
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    try:
        index = write_archive(
            args.rootfs,
            args.out,
            ref=args.ref,
            env=args.env,
            cmd=cmd,
            labels=_pairs(args.label, "--label"),
            mtime=mtime,
        )
    except ValueError as error:
        raise SystemExit(str(error)) from None
    manifest = index["manifests"][0]
    print(f">> {args.ref} ({manifest['digest']}) written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
