"""Load the gRPC stubs generated from proto/*.proto, generating them first when they are missing.

The stubs are build outputs (not committed). `python -m vgpu_components.protos` or
`make -C files/components proto` writes them next to the .proto files with grpcio-tools; an
installed wheel already carries them. The modules are returned as plain module objects so that
type checking does not depend on whether the generated files exist.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

PROTO_DIR = Path(__file__).resolve().parent / "proto"
PROTO_FILES = ("deviceplugin.proto", "podresources.proto", "dra.proto", "pluginregistration.proto")


def _stub_paths(proto: str) -> list[Path]:
    stem = proto.removesuffix(".proto")
    return [PROTO_DIR / f"{stem}_pb2.py", PROTO_DIR / f"{stem}_pb2_grpc.py"]


def generate(force: bool = False) -> list[Path]:
    """Compile the .proto files into Python stubs; returns the files written."""
    missing = [p for proto in PROTO_FILES for p in _stub_paths(proto) if force or not p.exists()]
    if not missing:
        return []
    try:
        protoc = importlib.import_module("grpc_tools.protoc")  # build-time tool, absent from the image
    except ImportError as exc:
        raise RuntimeError(
            f"gRPC stubs are missing in {PROTO_DIR} and grpcio-tools is not installed; "
            "run `make -C files/components proto` where grpcio-tools is available"
        ) from exc
    src_root = PROTO_DIR.parent.parent
    include = Path(str(protoc.__file__)).resolve().parent / "_proto"
    for proto in PROTO_FILES:
        args = [
            "grpc_tools.protoc",
            f"-I{src_root}",
            f"-I{include}",
            f"--python_out={src_root}",
            f"--pyi_out={src_root}",
            f"--grpc_python_out={src_root}",
            str(PROTO_DIR / proto),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed for {PROTO_DIR / proto}")
    importlib.invalidate_caches()
    return [p for proto in PROTO_FILES for p in _stub_paths(proto)]


def _load(name: str) -> ModuleType:
    module = f"vgpu_components.proto.{name}"
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError:
        generate()
        return importlib.import_module(module)


def deviceplugin() -> tuple[ModuleType, ModuleType]:
    """(messages, services) of the device plugin API v1beta1."""
    return _load("deviceplugin_pb2"), _load("deviceplugin_pb2_grpc")


def podresources() -> tuple[ModuleType, ModuleType]:
    """(messages, services) of the PodResources API v1."""
    return _load("podresources_pb2"), _load("podresources_pb2_grpc")


def dra() -> tuple[ModuleType, ModuleType]:
    """(messages, services) of the DRA kubelet plugin API v1."""
    return _load("dra_pb2"), _load("dra_pb2_grpc")


def pluginregistration() -> tuple[ModuleType, ModuleType]:
    """(messages, services) of kubelet's plugin registration API v1."""
    return _load("pluginregistration_pb2"), _load("pluginregistration_pb2_grpc")


def main() -> int:
    written = generate(force="--force" in sys.argv)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
