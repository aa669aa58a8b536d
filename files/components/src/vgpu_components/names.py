"""The names the components compose from the resource prefix: the contract's (contract/contract.yml,
names; generated into contract.py), which the roles compose the same from (roles/vgpu's names). Each
is `<prefix>/<name>`; the DRA driver and its DeviceClass are `<dra_driver>.<prefix>`."""

from __future__ import annotations

from vgpu_components import contract


def resource(prefix: str, which: str) -> str:
    """An extended resource: which is memory (gpu-memory) or cores (gpu-cores)."""
    return f"{prefix}/{contract.RESOURCES[which]}"


def annotation(prefix: str, which: str) -> str:
    """An annotation: gpus (a node's GPUs), gpu_uuid, gpu_index, assume_time (a pod's binding)..."""
    return f"{prefix}/{contract.ANNOTATIONS[which]}"


def label(prefix: str, which: str) -> str:
    """A node label: gpu_node or mps."""
    return f"{prefix}/{contract.LABELS[which]}"


def dra_driver(prefix: str) -> str:
    return f"{contract.DRA_DRIVER}.{prefix}"
