"""The extender's TLS files: its serving certificate and key, and the CA of its clients'.

kube-scheduler presents a certificate from that CA through its extender tlsConfig; any certificate
offered is verified against the CA (another CA's fails the handshake), and the HTTP layer answers
a verb only to a verified one (extender_http.py). Files renewed in place are loaded again.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass


@dataclass(frozen=True)
class TlsFiles:
    """The extender's serving certificate and key, and the CA that signs its clients' certificates."""

    cert_file: str
    key_file: str
    client_ca_file: str

    def context(self) -> ssl.SSLContext:
        """A server context that verifies any client certificate against the CA (the verbs then
        require one); ValueError naming the file that cannot be used."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.verify_mode = ssl.CERT_OPTIONAL
        self.load(context)
        return context

    def load(self, context: ssl.SSLContext) -> None:
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"extender.tls_cert_file {self.cert_file} / tls_key_file {self.key_file}: {exc}") from None
        try:
            context.load_verify_locations(cafile=self.client_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"extender.client_ca_file {self.client_ca_file}: {exc}") from None

    def stamp(self) -> tuple[float, ...]:
        return tuple(_mtime(p) for p in (self.cert_file, self.key_file, self.client_ca_file))


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0
