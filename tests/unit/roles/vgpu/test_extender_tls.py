"""The extender's mutual TLS, role side (issue 12): certificates issued, shared, renewed only when due.

roles/vgpu's extender_tls.yml runs for real (ansible-playbook, community.crypto from the pinned ansible
wheel) for two control-plane nodes on this machine, each with its own folder; then Python's ssl
module plays kube-scheduler and the extender with the files (a TLS handshake on 127.0.0.1).
"""

import http.server
import json
import re
import socket
import ssl
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from role_render import run_playbook

# include_role: the role's defaults stay below the inventory, which gives each node its own folder.
PLAY = """
- hosts: k8s_control_plane
  connection: local
  gather_facts: false
  tasks:
    - name: Place the certificates as the role does
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu
        tasks_from: extender_tls.yml
"""


def converge(work: Path, **extra) -> str:
    hosts = {
        name: {"ansible_python_interpreter": sys.executable, "vgpu_extender_tls_dir": str(work / name)}
        for name in ("cp1", "cp2")
    }
    (work / "hosts.yml").write_text(json.dumps({"k8s_control_plane": {"hosts": hosts}}))
    (work / "play.yml").write_text(PLAY)
    settings = {"vgpu_extender_tls_install_python": False, "ansible_facts": {"os_family": "Debian"}, **extra}
    return run_playbook("-i", str(work / "hosts.yml"), str(work / "play.yml"), "-e", json.dumps(settings)).stdout


def changed(output: str) -> dict:
    return {host: int(n) for host, n in re.findall(r"(cp\d)\s*:\s*ok=\d+\s+changed=(\d+)", output)}


def serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


@pytest.fixture(scope="module")
def issued(tmp_path_factory):
    work = tmp_path_factory.mktemp("tls")
    first = converge(work)
    assert not Path("/etc/vgpu/tls").exists(), "the test wrote to the machine's own folder"
    return work, first


def test_the_first_node_issues_and_every_node_gets_the_same_certificates(issued):
    work, first = issued
    assert changed(first)["cp1"] > 0 and changed(first)["cp2"] > 0
    for name in ("ca.crt", "server.crt", "server.key", "client.crt", "client.key"):
        assert (work / "cp1" / name).read_bytes() == (work / "cp2" / name).read_bytes(), name
    assert (work / "cp1" / "ca.key").exists()
    assert not (work / "cp2" / "ca.key").exists(), "the CA key stays on the first control-plane node"


def test_keys_are_private_and_the_extender_reads_its_own_through_its_group(issued):
    work, _first = issued
    for node in ("cp1", "cp2"):
        key = (work / node / "server.key").stat()
        assert (key.st_mode & 0o777, key.st_gid) == (0o640, 65534)
        assert (work / node / "client.key").stat().st_mode & 0o777 == 0o600
    assert (work / "cp1" / "ca.key").stat().st_mode & 0o777 == 0o600


def test_a_rerun_changes_nothing(issued):
    work, _first = issued
    before = serial(work / "cp1" / "server.crt")
    assert changed(converge(work)) == {"cp1": 0, "cp2": 0}
    assert serial(work / "cp1" / "server.crt") == before


def test_certificates_near_expiry_are_renewed_and_shared(issued):
    work, _first = issued
    ca, server = serial(work / "cp1" / "ca.crt"), serial(work / "cp1" / "server.crt")
    # Every leaf certificate (365 days) now expires "within" the renewal window; the CA (3650) does not.
    converge(work, vgpu_extender_tls_renew_days=400)
    assert serial(work / "cp1" / "ca.crt") == ca
    assert serial(work / "cp1" / "server.crt") != server
    assert (work / "cp2" / "server.crt").read_bytes() == (work / "cp1" / "server.crt").read_bytes()


def handshake(folder: Path, with_client_certificate: bool) -> str:
    """The extender's side (server.crt, requires a client certificate of the CA) against kube-scheduler's."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(folder / "server.crt", folder / "server.key")
    server_ctx.load_verify_locations(folder / "ca.crt")
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    seen: dict = {}

    def serve():
        conn, _addr = listener.accept()
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as tls:
                peer: Any = tls.getpeercert() or {}
                seen["peer"] = next(value for rdn in peer["subject"] for key, value in rdn if key == "commonName")
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["error"] = str(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    client_ctx = ssl.create_default_context(cafile=str(folder / "ca.crt"))
    if with_client_certificate:
        client_ctx.load_cert_chain(folder / "client.crt", folder / "client.key")
    try:
        with (
            socket.create_connection(("127.0.0.1", port)) as raw,
            client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.recv(2)
    except (ssl.SSLError, OSError):
        pass
    thread.join(10)
    listener.close()
    return seen.get("peer") or "refused: " + seen.get("error", "")


def test_kube_scheduler_and_the_extender_authenticate_each_other_on_127_0_0_1(issued):
    work, _first = issued
    assert handshake(work / "cp2", with_client_certificate=True) == "vgpu-kube-scheduler"
    assert handshake(work / "cp2", with_client_certificate=False).startswith("refused")


HEALTH_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Ask the extender for its health as verify_cluster.yml does
      ansible.builtin.include_role:
        name: vgpu.isolation.vgpu_stack
        tasks_from: extender_health.yml
    - name: Keep the answer
      ansible.builtin.copy:
        content: "{{ vgpu_stack_extender_health | to_json }}"
        dest: "{{ answer }}"
        mode: "0644"
"""


def extender_health(work: Path, url: str, **extra) -> dict[str, Any]:
    (work / "health.yml").write_text(HEALTH_PLAY)
    answer = work / "health.json"
    settings = {
        "vgpu_extender_url": url,
        "answer": str(answer),
        "ansible_python_interpreter": sys.executable,
        **extra,
    }
    run_playbook("-i", "localhost,", str(work / "health.yml"), "-e", json.dumps(settings))
    return dict(json.loads(answer.read_text()))


def test_the_cluster_check_reaches_the_extender_with_kube_schedulers_certificate(issued):
    """verify_cluster.yml (vgpu_stack's cluster_info) checks an extender that requires mutual TLS."""
    work, _first = issued
    folder = work / "cp1"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.crt", folder / "server.key")
    context.load_verify_locations(folder / "ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED

    class Healthz(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Healthz)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with_certificate = extender_health(work, url, vgpu_extender_tls_dir=str(folder))
        assert with_certificate["reachable"] is True, with_certificate
        # Without kube-scheduler's certificate the extender refuses the handshake.
        without = extender_health(work, url, vgpu_extender_tls_dir=str(work / "none"))
        assert without["reachable"] is False and without["error"], without
    finally:
        server.shutdown()
