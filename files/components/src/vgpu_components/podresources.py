"""Client of the kubelet PodResources API v1: who holds which of our device IDs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from vgpu_components import protos

MAX_MESSAGE = 64 * 1024 * 1024  # one device per unit makes answers large; kubelet has no cap here


@dataclass(frozen=True)
class ContainerDevices:
    namespace: str
    pod: str
    container: str
    device_ids: tuple[str, ...]
    # with list(..., also=...): the container's IDs of those other resources, by resource name
    others: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class ContainerClaimDevice:
    """One device of a DRA claim a container uses, as kubelet lists it (KubeletPodResourcesDynamicResources):
    the device's name in its driver's ResourceSlice and the CDI devices the driver prepared for it."""

    namespace: str
    pod: str
    container: str
    device: str
    cdi_devices: tuple[str, ...]


class PodResourcesClient:
    def __init__(self, socket_path: str, timeout_s: float = 5.0) -> None:
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._channel: grpc.Channel | None = None

    def _stub(self) -> Any:
        _msgs, services = protos.podresources()
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                f"unix://{self.socket_path}",
                options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
            )
        return services.PodResourcesListerStub(self._channel)

    def _list(self) -> Any:
        msgs, _services = protos.podresources()
        return self._stub().List(msgs.ListPodResourcesRequest(), timeout=self.timeout_s)

    def list(self, resource_name: str, also: Sequence[str] = ()) -> list[ContainerDevices]:
        """Every container on the node holding devices of resource_name (with its devices of the
        resources in `also`, read in the same call)."""
        return _devices(self._list(), resource_name, also)

    def claim_devices(self, driver: str) -> tuple[ContainerClaimDevice, ...]:
        """Every device of `driver` that a container on the node uses through a DRA claim."""
        return _claim_devices(self._list(), driver)

    def list_both(
        self, resource_name: str, driver: str
    ) -> tuple[Sequence[ContainerDevices], tuple[ContainerClaimDevice, ...]]:
        """list(resource_name) and claim_devices(driver) from one List (answers can be megabytes)."""
        response = self._list()
        return _devices(response, resource_name, ()), _claim_devices(response, driver)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def _devices(response: Any, resource_name: str, also: Sequence[str]) -> list[ContainerDevices]:
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            held: dict[str, list[str]] = {}
            for dev in container.devices:
                held.setdefault(dev.resource_name, []).extend(dev.device_ids)
            if held.get(resource_name):
                others = {name: tuple(held.get(name, ())) for name in also}
                out.append(
                    ContainerDevices(pod.namespace, pod.name, container.name, tuple(held[resource_name]), others)
                )
    return out


def _claim_devices(response: Any, driver: str) -> tuple[ContainerClaimDevice, ...]:
    return tuple(
        ContainerClaimDevice(
            pod.namespace, pod.name, container.name, resource.device_name, tuple(d.name for d in resource.cdi_devices)
        )
        for pod in response.pod_resources
        for container in pod.containers
        for claim in container.dynamic_resources
        for resource in claim.claim_resources
        if resource.driver_name == driver
    )
