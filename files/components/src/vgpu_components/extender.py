"""gpushare-scheduler-extender, the process: the verbs (extender_verbs.py) served over HTTP(S)
(extender_http.py), with the informers that keep the model in step and the expiry of stale
reservations, started and stopped together."""

from __future__ import annotations

import logging
import sys
import threading

from vgpu_components import component, config, extender_http, kube
from vgpu_components.extender_http import ExtenderServer
from vgpu_components.extender_poster import Poster, PosterProcess
from vgpu_components.extender_poster import command as poster_command
from vgpu_components.extender_verbs import Extender
from vgpu_components.scheduling import ClusterModel
from vgpu_components.tls import TlsFiles

log = logging.getLogger("vgpu.extender")


COMPONENT = component.Component(
    "gpushare-scheduler-extender",
    "kube-scheduler extender (filter or filter-tightest, prioritize, bind) that admits a pod on a node only "
    "where one GPU has its <resource_prefix>/gpu-memory free (config keys: resource_prefix and the "
    "extender section).",
    kubeconfig_help="kubeconfig file (default: in-cluster config, then ~/.kube/config)",
)


def run(started: component.Started) -> int:
    section = started.cfg["extender"]
    model = ClusterModel(started.cfg["resource_prefix"], float(section["reservation_ttl_s"]))
    api: kube.ClusterApi | None = None
    try:
        # One connection each for the verbs' worker threads (binds while no poster runs, preempt)
        # and the two watches.
        client = kube.api_client(started.args.kubeconfig, connections=extender_http.WORKERS + 2)
        api = kube.KubeClusterApi(client, component.node_name())
    except Exception as exc:
        log.error("no Kubernetes API (%s): filter answers from an empty model and bind fails", exc)
    # The Bindings are posted by a second process (extender_poster.py), kept running from here.
    poster = Poster() if api is not None else None
    extender = Extender(model, api, poster)
    tls = None
    if section["tls_cert_file"]:
        tls = TlsFiles(section["tls_cert_file"], section["tls_key_file"], section["client_ca_file"])
    try:
        server = ExtenderServer(section["address"], section["port"], extender, tls=tls)
    except ValueError as exc:
        raise config.ConfigError(str(exc)) from exc
    if api is not None:
        start_background(extender, started.stop)
    scheme = "https (client certificates required)" if tls else "http"
    log.info("listening on %s:%d, %s", section["address"], server.server_address[1], scheme)
    parts: list[component.Part] = [Serving(server)]
    if poster is not None:
        parts.append(PosterProcess(poster, poster_command(started.args), started.stop, extender.pods))
    return component.serve(started, *parts)


class Serving:
    """The extender's HTTP server on a thread of its own, shut down and closed at stop."""

    def __init__(self, server: ExtenderServer) -> None:
        self.server = server
        self.thread = threading.Thread(target=server.serve_forever, name="extender-http", daemon=True)

    def start(self) -> Serving:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(10)
        self.server.server_close()


def main(argv: list[str] | None = None) -> int:
    return component.main(COMPONENT, run, argv)


def start_background(extender: Extender, stop: threading.Event) -> None:
    """The watches that keep the model in step (the pods' from here until a poster takes them
    over), and the expiry of stale reservations."""
    for kind, informer in extender.informers.items():
        threading.Thread(target=informer.run, args=(stop,), name=f"sync-{kind}", daemon=True).start()
    pods = extender.pods
    if pods is not None:
        pods.watch_here()

        def stop_pods() -> None:
            stop.wait()
            pods.stop()

        threading.Thread(target=stop_pods, name="pods-stop", daemon=True).start()

    def expire() -> None:
        while not stop.wait(10):
            extender.model.expire_reservations()

    threading.Thread(target=expire, name="expire", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
