"""The device plugin's sockets and its registration with kubelet, kept up across kubelet restarts.

kubelet's device manager empties its folder when it starts and serves a new kubelet.sock; a plugin
must then serve its sockets again and register again. ensure() notices either (a new kubelet.sock,
or a socket of ours gone) and does both; the plugin calls it from its watch loop.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from vgpu_components import protos

log = logging.getLogger("vgpu.device_plugin")

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
# Our answers to GetPreferredAllocation requests can be large; kubelet's lists of available IDs too.
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]


@dataclass
class Endpoint:
    """One resource this plugin serves: its socket and the service behind it (plugin_services.py)."""

    resource: str
    socket_path: Path
    service: Any
    server: grpc.Server | None = None


class Registrar:
    """Serves the endpoints' sockets in the kubelet's device-plugin folder and registers them."""

    def __init__(self, plugin_dir: Path, endpoints: list[Endpoint], message_bytes: int) -> None:
        self.plugin_dir = plugin_dir
        self.kubelet_socket = plugin_dir / KUBELET_SOCKET
        self.endpoints = endpoints
        self.message_bytes = message_bytes
        self.registered = False
        self.registrations = 0
        self._kubelet_id: tuple[int, int] | None = None
        self._retry_at = 0.0  # after a failed registration, wait a moment before the next try

    def serve(self) -> None:
        services = protos.deviceplugin()[1]
        for endpoint in self.endpoints:
            if endpoint.server is not None:
                # Wait: a server still shutting down unlinks its socket path, which by then could be
                # the new server's socket (kubelet then finds none).
                endpoint.server.stop(grace=0).wait(2)
            endpoint.socket_path.unlink(missing_ok=True)
            # One worker is pinned per ListAndWatch stream; keep spare workers for the unary calls.
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=GRPC_OPTIONS)
            services.add_DevicePluginServicer_to_server(endpoint.service, server)
            server.add_insecure_port(f"unix://{endpoint.socket_path}")
            server.start()
            endpoint.server = server
            log.info("serving %s on %s", endpoint.resource, endpoint.socket_path)

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = self.kubelet_socket.stat()
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_ctime_ns)

    def register(self) -> None:
        msgs, services = protos.deviceplugin()
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = services.RegistrationStub(channel)
            for endpoint in self.endpoints:
                service = endpoint.service
                stub.Register(
                    msgs.RegisterRequest(
                        version=API_VERSION,
                        endpoint=endpoint.socket_path.name,
                        resource_name=endpoint.resource,
                        options=msgs.DevicePluginOptions(
                            get_preferred_allocation_available=service.preferred_allocation
                        ),
                    ),
                    timeout=5,
                )
                log.info(
                    "registered with kubelet",
                    extra={"resource": endpoint.resource, "devices": len(service.devices())},
                )
        self.registered = True
        self.registrations += 1
        log.info("memory ListAndWatch message: %d bytes", self.message_bytes)

    def ensure(self) -> None:
        """Start or restart serving and registration after a kubelet (re)start or a lost socket."""
        kubelet_id = self._kubelet_identity()
        if kubelet_id is None:
            if self.registered:
                log.warning("kubelet socket %s is gone; waiting for kubelet", self.kubelet_socket)
            self.registered = False
            return
        socket_lost = not all(e.socket_path.exists() for e in self.endpoints)
        if self.registered and kubelet_id == self._kubelet_id and not socket_lost:
            return
        if self.registered:
            log.warning("kubelet restarted or our socket was removed; registering again")
        elif time.monotonic() < self._retry_at:
            return
        self.registered = False
        self.serve()
        try:
            self.register()
        except grpc.RpcError as exc:
            log.error("registration with kubelet failed (retrying in 1 s): %s", exc)
            self._retry_at = time.monotonic() + 1.0
            return
        self._kubelet_id = kubelet_id

    def stop_servers(self) -> None:
        for endpoint in self.endpoints:
            if endpoint.server is not None:
                endpoint.server.stop(grace=1).wait(2)

    def remove_sockets(self) -> None:
        for endpoint in self.endpoints:
            endpoint.socket_path.unlink(missing_ok=True)
