"""The DRA path's objects for the end-to-end tests and the throughput benchmark (docs/dra.md).

Imported with the installed components' package (the Makefile installs it; bench/_components_path.py for the benches):
the ResourceSlices of simulated nodes are published by the driver's own code.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from vgpu_components import config as vgpu_config
from vgpu_components import kube
from vgpu_components.dra_driver import DraDriver
from vgpu_components.nvml import Gpu

from tests.k8s.cluster import PREFIX, UNIT_MIB, api_client, gpu_uuid

DRIVER = f"gpu.{PREFIX}"
RESOURCE_API = "resource.k8s.io/v1"


def driver_config(state_dir: Path) -> dict[str, Any]:
    """The components' configuration for a DRA driver of a simulated node, its host paths under state_dir."""
    cfg = vgpu_config.load(None, environ={})
    cfg["unit_mib"] = UNIT_MIB
    cfg["state_dir"] = str(state_dir / "state")
    cfg["dra"].update(
        plugins_dir=str(state_dir / "plugins"),
        registry_dir=str(state_dir / "registry"),
        cdi_dir=str(state_dir / "cdi"),
        nvidia_cdi_dirs=str(state_dir / "etc-cdi"),
    )
    return cfg


def node_gpus(node: str, gpus_mib: Iterable[int]) -> list[Gpu]:
    """The GPUs of a simulated node as NVML would report them (the UUIDs of cluster.gpus_annotation)."""
    return [Gpu(uuid=gpu_uuid(node, i), index=i, total_mib=mib, name="Simulated 12G") for i, mib in enumerate(gpus_mib)]


def dra_api() -> kube.DraApi:
    """The driver's view of the local control plane (tests/k8s), with the admin identity."""
    return kube.KubeDraApi(api_client())


def publish_slice(api: kube.DraApi, node: str, gpus_mib: Iterable[int], state_dir: Path) -> bool:
    """Publish a simulated node's ResourceSlice as its driver's publisher would; True when written."""
    driver = DraDriver(driver_config(state_dir), node_gpus(node, gpus_mib), node, api=api)
    return driver.publish_slice()


def device_class_body() -> dict[str, Any]:
    """The DeviceClass roles/vgpu_stack applies with vgpu_scheduling: dra."""
    return {
        "apiVersion": RESOURCE_API,
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def claim_template_body(name: str, mib: int) -> dict[str, Any]:
    """A ResourceClaimTemplate for `mib` MiB of one GPU's memory (the example of docs/dra.md)."""
    request = {"deviceClassName": DRIVER, "capacity": {"requests": {"memory": f"{mib}Mi"}}}
    return {
        "apiVersion": RESOURCE_API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def pod_body(name: str, template: str, node_selector: Mapping[str, str]) -> dict[str, Any]:
    """A pod whose one container uses a claim "gpu" made from `template`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": dict(node_selector),
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "main", "image": "localhost/vgpu-e2e:none", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def pod_claim(core: Any, resource: Any, namespace: str, pod: str) -> dict[str, Any]:
    """The ResourceClaim made for a pod's claim "gpu", as raw JSON."""
    status = core.read_namespaced_pod(pod, namespace).status
    name = next(s.resource_claim_name for s in status.resource_claim_statuses or [] if s.name == "gpu")
    response = resource.read_namespaced_resource_claim(name, namespace, _preload_content=False)
    return dict(json.loads(response.data))
