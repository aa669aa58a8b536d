"""The DRA driver's gRPC side: the DRAPlugin v1 service kubelet prepares claims through, the
registration service of kubelet's plugin watcher, and the server that serves both on their sockets
(made again when a socket is removed, and kubelet registers the driver again)."""

from __future__ import annotations

import logging
import threading
from concurrent import futures
from pathlib import Path
from typing import Any, Protocol

import grpc
from kubernetes.client.rest import ApiException

from vgpu_components import protos
from vgpu_components.dra import ClaimDevice, PrepareError

log = logging.getLogger("vgpu.dra_driver")

PLUGIN_TYPE = "DRAPlugin"
SERVICE = "v1.DRAPlugin"  # kubelet 1.34+ (k8s.io/kubelet/pkg/apis/dra/v1)
SOCKET = "dra.sock"


class Claims(Protocol):
    """What the service asks of the driver (dra_claims.ClaimPreparer)."""

    kind: str

    def prepare(self, namespace: str, uid: str, name: str) -> list[ClaimDevice]: ...

    def unprepare(self, uid: str) -> None: ...


class DraService:
    """The DRAPlugin v1 service (method names are the gRPC ones). Each claim gets its own answer:
    one that fails carries its error, and kubelet asks again for it alone."""

    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.msgs = protos.dra()[0]

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        out = {}
        for claim in request.claims:
            try:
                devices = self.claims.prepare(claim.namespace, claim.uid, claim.name)
            except (PrepareError, OSError, ApiException) as exc:
                log.error("prepare of %s/%s failed: %s", claim.namespace, claim.name, exc, extra={"claim": claim.uid})
                out[claim.uid] = self.msgs.NodePrepareResourceResponse(error=str(exc))
                continue
            out[claim.uid] = self.msgs.NodePrepareResourceResponse(devices=[self._device(d) for d in devices])
        return self.msgs.NodePrepareResourcesResponse(claims=out)

    def _device(self, device: ClaimDevice) -> Any:
        msg = self.msgs.Device(
            request_names=[device.request],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=[f"{self.claims.kind}={device.alloc_id}"],
        )
        if device.share_id:
            msg.share_id = device.share_id
        return msg

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        out = {}
        for claim in request.claims:
            try:
                self.claims.unprepare(claim.uid)
                out[claim.uid] = self.msgs.NodeUnprepareResourceResponse()
            except (PrepareError, OSError) as exc:
                log.error("unprepare of %s/%s failed: %s", claim.namespace, claim.name, exc)
                out[claim.uid] = self.msgs.NodeUnprepareResourceResponse(error=str(exc))
        return self.msgs.NodeUnprepareResourcesResponse(claims=out)


class RegistrationService:
    """kubelet's plugin watcher asks who we are on the registration socket, then tells the outcome."""

    def __init__(self, server: DraServer) -> None:
        self.server = server
        self.msgs = protos.pluginregistration()[0]

    def GetInfo(self, request: Any, context: Any) -> Any:
        return self.msgs.PluginInfo(
            type=PLUGIN_TYPE, name=self.server.name, endpoint=str(self.server.socket_path), supported_versions=[SERVICE]
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self.server.registered = bool(request.plugin_registered)
        if request.plugin_registered:
            log.info("registered with kubelet", extra={"driver": self.server.name})
        else:
            log.error("kubelet refused the registration: %s", request.error)
        return self.msgs.RegistrationStatusResponse()


class DraServer:
    """Both services on their sockets: <plugins_dir>/<driver>/dra.sock and the registration socket
    <registry_dir>/<driver>-reg.sock that kubelet's plugin watcher finds."""

    def __init__(self, name: str, section: dict[str, Any], claims: Claims) -> None:
        self.name = name
        self.claims = claims
        self.socket_path = Path(section["plugins_dir"]) / name / SOCKET
        self.registration_path = Path(section["registry_dir"]) / f"{name}-reg.sock"
        self.registered = False
        self._server: grpc.Server | None = None

    def serve(self) -> None:
        if self._server is not None:
            # Wait: a server still shutting down unlinks its socket paths, which by then could be
            # the new server's sockets (kubelet then finds none).
            self._server.stop(grace=0).wait(2)
        dra_services = protos.dra()[1]
        registration_services = protos.pluginregistration()[1]
        for path in (self.socket_path, self.registration_path):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        dra_services.add_DRAPluginServicer_to_server(DraService(self.claims), server)
        registration_services.add_RegistrationServicer_to_server(RegistrationService(self), server)
        # The service socket first: kubelet dials it as soon as it sees the registration socket.
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.add_insecure_port(f"unix://{self.registration_path}")
        server.start()
        self._server = server
        log.info("serving %s on %s (registration %s)", self.name, self.socket_path, self.registration_path)

    def watch(self, stopping: threading.Event) -> None:
        """A removed socket (kubelet's folder cleaned, a node reset) is made again within a second;
        kubelet's plugin watcher then registers the driver again."""
        while not stopping.wait(1.0):
            if not (self.socket_path.exists() and self.registration_path.exists()):
                log.warning("a socket of the driver is gone; serving again")
                self.registered = False
                try:
                    self.serve()
                except Exception as exc:
                    log.error("serving again failed: %s", exc)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=1).wait(2)
        for path in (self.registration_path, self.socket_path):
            path.unlink(missing_ok=True)
