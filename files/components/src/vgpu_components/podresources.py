"""Client of the kubelet PodResources API v1: who holds which of our device IDs."""

from __future__ import annotations

from dataclasses import dataclass
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

    def list(self, resource_name: str) -> list[ContainerDevices]:
        """Every container on the node holding devices of resource_name."""
        msgs, _services = protos.podresources()
        stub = self._stub()
        response = stub.List(msgs.ListPodResourcesRequest(), timeout=self.timeout_s)
        out = []
        for pod in response.pod_resources:
            for container in pod.containers:
                held = [d for dev in container.devices if dev.resource_name == resource_name for d in dev.device_ids]
                if held:
                    out.append(ContainerDevices(pod.namespace, pod.name, container.name, tuple(held)))
        return out

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
