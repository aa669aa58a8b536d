"""Finding 7: the extender authenticated no caller. /bind bound a kube-system pod that requests no
GPU to an arbitrary node, and a forged /filter made the extender PATCH a victim pod.

- With extender.tls_cert_file, tls_key_file and client_ca_file set, the extender serves HTTPS
  and answers only clients whose certificate the client CA signed (kube-scheduler's tlsConfig).
  Without them it serves plain HTTP on a loopback address only; a partial set is an error.
- /bind refuses a pod that requests no GPU memory.
- No request makes the extender write to any pod but through the Binding of a pod it places.

The extender runs as its own process (python -m vgpu_components.extender) where the config and
the wire matter, against a recording HTTP peer in place of kube-apiserver; tests/k8s runs it
against the real kube-apiserver and kube-scheduler over mTLS.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import RecordingApiServer, Scheduler, kubeconfig_of, make_pki, node_obj, pod_obj

from tests.polling import wait_for

SRC = Path(__file__).resolve().parents[2] / "files" / "components" / "src"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ExtenderProcess:
    """The extender's own entry point with a config file; stopped with SIGTERM."""

    def __init__(self, work: Path, extender: dict[str, Any], kubeconfig: Path | None = None) -> None:
        self.port = int(extender.setdefault("port", free_port()))
        extender.setdefault("address", "127.0.0.1")
        config = work / "config.yaml"
        config.write_text(json.dumps({"log_format": "text", "extender": extender}))  # JSON is YAML
        args = [sys.executable, "-m", "vgpu_components.extender", "--config", str(config)]
        args += ["--kubeconfig", str(kubeconfig or work / "missing.kubeconfig")]
        env = dict(os.environ, PYTHONPATH=str(SRC))
        self.process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_listening(self) -> None:
        def listening() -> bool:
            assert self.process.poll() is None, f"the extender exited: {self.output()}"
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except OSError:
                return False
            return True

        wait_for(f"the extender to listen on {self.port}", listening, 20, 0.1)

    def exit_status(self, timeout: float = 20) -> int:
        return self.process.wait(timeout)

    def output(self) -> str:
        if self.process.poll() is None:
            self.stop()
        assert self.process.stdout is not None
        return self.process.stdout.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
def pki(short_tmp: Path) -> dict[str, Path]:
    return make_pki(short_tmp / "pki")


@pytest.fixture
def https_extender(short_tmp: Path, pki: dict[str, Path]) -> Iterator[ExtenderProcess]:
    extender = ExtenderProcess(
        short_tmp,
        {
            "tls_cert_file": str(pki["server.crt"]),
            "tls_key_file": str(pki["server.key"]),
            "client_ca_file": str(pki["ca.crt"]),
        },
    )
    extender.wait_listening()
    yield extender
    extender.stop()


def tls_request(
    port: int, pki: dict[str, Path], client: str | None, method: str = "POST", path: str = "/filter"
) -> int:
    context = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    if client is not None:
        context.load_cert_chain(str(pki[f"{client}.crt"]), str(pki[f"{client}.key"]))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    body = json.dumps({"Pod": pod_obj("p", 1000), "Nodes": None, "NodeNames": ["gpu-a"]}) if method == "POST" else None
    conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    return status


def test_with_the_three_tls_keys_only_clients_of_the_ca_are_answered(
    https_extender: ExtenderProcess, pki: dict[str, Path]
) -> None:
    port = https_extender.port
    assert tls_request(port, pki, "client") == 200
    assert tls_request(port, pki, None) == 403  # no certificate: no verb
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        tls_request(port, pki, "stranger")  # another CA's certificate: no handshake
    # kubelet's probes present no certificate: health answers, over HTTPS only.
    assert tls_request(port, pki, None, "GET", "/healthz") == 200
    # Plain HTTP gets no answer from the TLS port.
    with socket.create_connection(("127.0.0.1", https_extender.port), timeout=5) as sock:
        sock.sendall(b"POST /bind HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
        try:
            answer = sock.recv(4096)
        except ConnectionResetError:
            answer = b""
    assert not answer.startswith(b"HTTP/1.1 200"), answer


@pytest.mark.parametrize(
    ("extender", "message"),
    [
        ({"address": "::"}, "plain HTTP"),
        ({"tls_cert_file": "/x.crt"}, "tls_key_file"),
        ({"tls_cert_file": "/x.crt", "tls_key_file": "/x.key"}, "client_ca_file"),
        ({"tls_cert_file": "/nonexistent.crt", "tls_key_file": "/x.key", "client_ca_file": "/x.crt"}, "nonexistent"),
    ],
)
def test_an_unauthenticated_or_partial_configuration_is_refused(
    short_tmp: Path, extender: dict[str, Any], message: str
) -> None:
    process = ExtenderProcess(short_tmp, extender)
    try:
        status = process.exit_status()
    except subprocess.TimeoutExpired:
        process.stop()
        pytest.fail(f"the extender started with {extender}")
    output = process.output()
    assert status == 2 and message in output, output


def test_bind_refuses_a_pod_that_requests_no_gpu(cluster: Scheduler) -> None:
    system_pod = pod_obj("coredns", None)
    system_pod["metadata"]["namespace"] = "kube-system"
    cluster.api.pods[("kube-system", "coredns")] = system_pod
    args = {"PodName": "coredns", "PodNamespace": "kube-system", "PodUID": "uid-coredns", "Node": "gpu-a"}
    status, result = cluster.post("/bind", args)
    assert status == 200 and "requests no vgpu.io/gpu-memory" in result["Error"], result
    assert cluster.api.bindings == []


def test_a_forged_filter_makes_the_extender_write_to_no_pod(short_tmp: Path, apiserver: tuple[Any, Any]) -> None:
    server: RecordingApiServer = apiserver[0]
    server.nodes = [node_obj("gpu-a", [("GPU-aaaaaaaa-0000-0000-0000-000000000000", 12288, 0)])]
    server.watch_delay_s = 0.5
    kubeconfig = kubeconfig_of(server, short_tmp / "kubeconfig")
    extender = ExtenderProcess(short_tmp, {}, kubeconfig=kubeconfig)
    try:
        extender.wait_listening()
        victim = pod_obj("victim", 1000, uid="uid-victim")
        victim["metadata"]["namespace"] = "kube-system"
        conn = http.client.HTTPConnection("127.0.0.1", extender.port, timeout=5)
        for _i in range(3):  # turned away from a node that does not exist, while gpu-a has room
            body = json.dumps({"Pod": victim, "Nodes": None, "NodeNames": ["no-such-node"]})
            conn.request("POST", "/filter", body=body, headers={"Content-Type": "application/json"})
            assert conn.getresponse().read()
        # The old nudger patched within 1 to 2 s. Its successor's own progress, not a sleep: each
        # watch here lasts 0.5 s, so eight more watches are four seconds of the extender running.
        watches = sum(1 for _m, path, _c, _b in server.requests if "watch=true" in path)
        wait_for(
            "eight more watches by the extender after the filters",
            lambda: sum(1 for _m, path, _c, _b in server.requests if "watch=true" in path) >= watches + 8,
            60,
            0.05,
        )
    finally:
        extender.stop()
    writes = [(method, path) for method, path, _ctype, _body in server.requests if method != "GET"]
    assert writes == [], f"the extender wrote to the API server: {writes}"
