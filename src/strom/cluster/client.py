"""A minimal asyncio Kafka client for broker-to-broker requests (replica fetches, markers).

Brokers talk to each other with the same wire protocol clients use, encoded by the schema
codecs, over the inter-broker listener's security protocol (`strom.security.client`). One connection carries one request at a time: the callers (a replica fetcher, a marker
sender) are sequential anyway, and it keeps a lost connection easy to reason about — it is
closed and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from strom.protocol.codec import Struct, request_codec, response_codec
from strom.protocol.header import decode_response_header, encode_request_header
from strom.security.client import PLAINTEXT, ClientAuthenticationError, ClientSecurity, authenticate

_SIZE = struct.Struct(">i")


class BrokerConnectionError(ConnectionError):
    """The peer could not be reached, or the connection broke mid-request."""


class BrokerClient:
    def __init__(self, host: str, port: int, *, client_id: str,
                 timeout_s: float = 30.0, security: ClientSecurity = PLAINTEXT) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    async def _connect(self) -> None:
        security = self.security
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=security.ssl_context,
                                        server_hostname=security.server_hostname(self.host)),
                self.timeout_s)
            self._reader, self._writer = reader, writer
            if security.sasl is not None:
                await authenticate(security.sasl, reader, writer, self.client_id, self.timeout_s)
        except ClientAuthenticationError as exc:
            self.close()
            raise BrokerConnectionError(f"cannot authenticate to {self.host}:{self.port}: "
                                        f"{exc}") from exc
        except (TimeoutError, OSError, asyncio.IncompleteReadError, RuntimeError) as exc:
            self.close()
            raise BrokerConnectionError(f"cannot connect to {self.host}:{self.port}: {exc}") from exc

    async def request(self, api_key: int, version: int, body: Any,
                      timeout_s: float | None = None) -> Struct:
        """Send one request and return its decoded response."""
        async with self._lock:
            if self._writer is not None and (self._writer.is_closing()
                                             or (self._reader is not None
                                                 and self._reader.at_eof())):
                self.close()  # the peer went away since the last request: connect again
            if self._writer is None:
                await self._connect()
            assert self._reader is not None and self._writer is not None
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            cid = self._correlation
            req = request_codec(api_key, version)
            payload = encode_request_header(api_key, version, cid, self.client_id) + req.encode(body)
            try:
                self._writer.write(_SIZE.pack(len(payload)) + payload)
                await self._writer.drain()
                size_bytes = await asyncio.wait_for(self._reader.readexactly(4),
                                                    timeout_s or self.timeout_s)
                (size,) = _SIZE.unpack(size_bytes)
                frame = await asyncio.wait_for(self._reader.readexactly(size),
                                               timeout_s or self.timeout_s)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, RuntimeError) as exc:
                # (uvloop raises RuntimeError writing to a transport closed meanwhile: kept
                # open, every later request failed the same way and the peer was lost for good)
                self.close()
                raise BrokerConnectionError(
                    f"request to {self.host}:{self.port} failed: {exc!r}") from exc
            resp = response_codec(api_key, version)
            got, pos = decode_response_header(frame, 0, resp.header_version)
            if got != cid:
                self.close()
                raise BrokerConnectionError(f"correlation id {got} != {cid} from {self.host}")
            value, _ = resp.decode(memoryview(frame), pos)
            return value

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class BrokerClients:
    """One client per peer broker, kept across requests and replaced when the broker's
    endpoint changes (a restarted broker may come back on another port)."""

    def __init__(self, client_id: str, timeout_s: float,
                 security: ClientSecurity = PLAINTEXT) -> None:
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._clients: dict[int, BrokerClient] = {}

    def get(self, broker_id: int, host: str, port: int) -> BrokerClient:
        client = self._clients.get(broker_id)
        if client is None or (client.host, client.port) != (host, port):
            if client is not None:
                client.close()
            client = self._clients[broker_id] = BrokerClient(
                host, port, client_id=self.client_id, timeout_s=self.timeout_s,
                security=self.security)
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
