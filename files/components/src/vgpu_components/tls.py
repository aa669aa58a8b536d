"""The extender's TLS: its files (serving certificate and key, the CA of its clients') and the
server side of each connection.

kube-scheduler presents a certificate from that CA through its extender tlsConfig; any certificate
offered is verified against the CA (another CA's fails the handshake), and the HTTP layer answers
a verb only to a verified one (extender_http.py). Files renewed in place are loaded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any


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
        # No TLS 1.3 session tickets: kube-scheduler's client keeps no session cache and never
        # resumes, so they were a quarter of the CPU of each of its many handshakes for nothing.
        context.num_tickets = 0
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


class TlsStream:
    """One server-side TLS connection over a plain asyncio stream, read and written like one.

    asyncio's own TLS runs the handshake on the event loop; its crypto (key exchange, signing,
    checking the client's certificate) then holds up every other connection, and kube-scheduler
    opens a new connection for most binds. Here each handshake step runs on a worker thread
    (OpenSSL releases the interpreter lock), so the loop keeps answering filters meanwhile. Records
    are then decrypted on demand, never ahead of what the request reader asks for.
    """

    def __init__(
        self, context: ssl.SSLContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._raw_reader = reader
        self._raw_writer = writer
        self._buffer = bytearray()
        self.limit = limit  # readuntil gives up past this many bytes, as a StreamReader does

    async def handshake(self, executor: Executor) -> None:
        """Complete the handshake; ssl.SSLError when the peer is refused (no TLS, a certificate
        the CA did not sign), ConnectionError when it goes away."""
        loop = asyncio.get_running_loop()
        # The client speaks first: wait for its hello here, not in a worker's first handshake step
        # (that step could only ask for it; one thread hand-off fewer per connection).
        await self._receive_handshake()
        while True:
            try:
                await loop.run_in_executor(executor, self._tls.do_handshake)
                break
            except ssl.SSLWantReadError:
                self._flush()
                await self._receive_handshake()
            except ssl.SSLError:
                self._flush()  # the alert that tells the peer why
                raise
        self._flush()

    async def _receive_handshake(self) -> None:
        data = await self._raw_reader.read(65536)
        if not data:
            raise ConnectionResetError("the peer closed during the TLS handshake")
        self._incoming.write(data)

    def _flush(self) -> None:
        if self._outgoing.pending > 0:
            self._raw_writer.write(self._outgoing.read())

    async def _decrypt_more(self) -> None:
        """At least one more byte of plaintext into the buffer (IncompleteReadError at the end)."""
        while True:
            try:
                chunk = self._tls.read(65536)
            except ssl.SSLWantReadError:
                data = await self._raw_reader.read(65536)
                if not data:
                    raise asyncio.IncompleteReadError(bytes(self._buffer), None) from None
                self._incoming.write(data)
                continue
            except ssl.SSLZeroReturnError:  # the peer's close_notify
                raise asyncio.IncompleteReadError(bytes(self._buffer), None) from None
            finally:
                self._flush()  # TLS 1.3 may answer a key update
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(self._buffer), None)
            self._buffer += chunk
            return

    # --- what the HTTP layer uses of asyncio's StreamReader and StreamWriter --------------------
    async def readexactly(self, count: int, /) -> bytes:
        while len(self._buffer) < count:
            await self._decrypt_more()
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    async def readuntil(self, separator: bytes = b"\n", /) -> bytes:
        while (at := self._buffer.find(separator)) < 0:
            if len(self._buffer) > self.limit:
                raise asyncio.LimitOverrunError("separator not found within the limit", len(self._buffer))
            await self._decrypt_more()
        end = at + len(separator)
        data = bytes(self._buffer[:end])
        del self._buffer[:end]
        return data

    def write(self, data: bytes, /) -> None:
        self._tls.write(data)
        self._flush()

    async def drain(self) -> None:
        await self._raw_writer.drain()

    def get_extra_info(self, name: str, default: Any = None, /) -> Any:
        if name == "peercert":
            return self._tls.getpeercert()
        return self._raw_writer.get_extra_info(name, default)

    def close(self) -> None:
        with contextlib.suppress(ssl.SSLError):
            self._tls.unwrap()  # close_notify; the peer's own is not awaited
        self._flush()
        self._raw_writer.close()
