"""The extender's TLS context (tls.py) as a client meets it."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

from fakes import make_pki
from vgpu_components.tls import TlsFiles


def test_the_extender_issues_no_session_tickets(short_tmp: Path) -> None:
    """kube-scheduler's TLS client keeps no session cache, so it never resumes a session: a new
    connection (most binds open one) pays a full handshake either way, and the tickets the server
    used to send after each handshake were CPU spent for nothing (a quarter of its handshake)."""
    pki = make_pki(short_tmp / "pki")
    server = TlsFiles(str(pki["server.crt"]), str(pki["server.key"]), str(pki["ca.crt"])).context()
    client = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    client.load_cert_chain(str(pki["client.crt"]), str(pki["client.key"]))
    ours, theirs = socket.socketpair()

    def serve() -> None:
        with server.wrap_socket(theirs, server_side=True) as tls:
            tls.sendall(tls.recv(1))

    thread = threading.Thread(target=serve)
    thread.start()
    with client.wrap_socket(ours, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"x")
        assert tls.recv(1) == b"x"  # the tickets, if any, came before the answer
        assert tls.version() == "TLSv1.3"
        session = tls.session
        assert session is not None and not session.has_ticket
    thread.join(10)
