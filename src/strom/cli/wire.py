"""A minimal blocking Kafka client for the CLI: one connection per broker, Strom's own codecs.

For the APIs librdkafka's admin client lacks or cannot express (ListTransactions,
DescribeTransactions, configs of the cluster-wide broker defaults, whose resource name is
empty). It works against any Kafka broker that has the APIs; only PLAINTEXT listeners.
"""

from __future__ import annotations

import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from strom.cli.common import EXIT_UNREACHABLE, CliError, UsageError, load_properties

API_VERSIONS, METADATA = 18, 3


def error_name(code: int) -> str:
    from strom.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


class Connection:
    def __init__(self, host: str, port: int, timeout: float, *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = f"{host}:{port}"
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
            if ssl_context is not None:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        except OSError as e:
            raise CliError(f"cannot reach broker at {self.address}: {e.strerror or e}",
                           EXIT_UNREACHABLE) from None
        self.sock.settimeout(timeout)
        self.correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        resp = self.call(API_VERSIONS, 0, {})
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def close(self) -> None:
        self.sock.close()

    def version(self, api_key: int, wanted: int, name: str) -> int:
        """The highest version of `api_key` both sides speak, at most `wanted`."""
        from strom.protocol.codec import supported_versions

        ours = supported_versions(api_key)
        theirs = self.versions.get(api_key)
        if theirs is None or theirs[1] < ours[0] or theirs[0] > min(wanted, ours[1]):
            raise CliError(f"broker {self.address} does not support {name}")
        return min(wanted, ours[1], theirs[1])

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise CliError(f"broker {self.address} closed the connection", EXIT_UNREACHABLE)
            buf += chunk
        return bytes(buf)

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        from strom.protocol.codec import request_codec, response_codec
        from strom.protocol.header import (
            decode_response_header,
            encode_request_header,
            response_header_version,
        )

        self.correlation += 1
        payload = encode_request_header(api_key, version, self.correlation, "strom-cli") + \
            request_codec(api_key, version).encode(body)
        try:
            self.sock.sendall(len(payload).to_bytes(4, "big") + payload)
            size = int.from_bytes(self._recv(4), "big", signed=True)
            data = self._recv(size)
        except TimeoutError:
            raise CliError(f"timed out waiting for broker {self.address}",
                           EXIT_UNREACHABLE) from None
        except OSError as e:
            raise CliError(f"lost the connection to {self.address}: {e.strerror or e}",
                           EXIT_UNREACHABLE) from None
        _, pos = decode_response_header(data, 0, response_header_version(api_key, version))
        return response_codec(api_key, version).decode(memoryview(data)[pos:])[0]


@dataclass
class Cluster:
    """Connections by broker id, opened on demand from the bootstrap's metadata."""

    timeout: float
    brokers: dict[int, tuple[str, int]]
    conns: dict[int, Connection]
    controller: int = -1
    racks: dict[int, str | None] = field(default_factory=dict)

    @classmethod
    def connect(cls, bootstrap: str, timeout: float) -> Cluster:
        last: CliError | None = None
        for server in [s.strip() for s in bootstrap.split(",") if s.strip()]:
            host, _, port = server.rpartition(":")
            if not host or not port.isdigit():
                raise UsageError(f"invalid bootstrap server {server!r}: expected host:port")
            try:
                conn = Connection(host.strip("[]"), int(port), timeout)
            except CliError as e:
                last = e
                continue
            meta = conn.call(METADATA, conn.version(METADATA, 1, "Metadata"), {"topics": []})
            brokers = {b.node_id: (b.host, b.port) for b in meta.brokers}
            conn.close()
            return cls(timeout, brokers, {}, meta.controller_id,
                       {b.node_id: b.rack for b in meta.brokers})
        raise last or UsageError("no bootstrap server given")

    def conn(self, broker_id: int) -> Connection:
        c = self.conns.get(broker_id)
        if c is None:
            host, port = self.brokers[broker_id]
            c = self.conns[broker_id] = Connection(host, port, self.timeout)
        return c

    def any_conn(self) -> Connection:
        """The controller's connection if there is one (some APIs must go there), else any."""
        ids = sorted(self.brokers, key=lambda b: (b != self.controller, b))
        last: CliError | None = None
        for broker_id in ids:
            try:
                return self.conn(broker_id)
            except CliError as e:
                last = e
        raise last or CliError("the cluster has no brokers", EXIT_UNREACHABLE)

    def topics(self, names: list[str] | None) -> dict[str, dict[int, list[int]]]:
        """Replicas per partition of these topics (None: all); unknown topics are left out."""
        conn = self.any_conn()
        version = conn.version(METADATA, 9, "Metadata")
        body: dict[str, Any] = {
            "topics": None if names is None else [{"name": n} for n in names],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        }
        meta = conn.call(METADATA, version, body)
        return {t.name: {p.partition_index: list(p.replica_nodes) for p in t.partitions}
                for t in meta.topics if t.error_code == 0}

    def close(self) -> None:
        for c in self.conns.values():
            c.close()


def connect_cluster(bootstrap: str, command_config: Any, timeout: float) -> Cluster:
    """Metadata from the first reachable bootstrap server; PLAINTEXT listeners only."""
    if command_config is not None:
        props = load_properties(command_config)
        protocol = props.get("security.protocol", "PLAINTEXT").upper()
        if protocol != "PLAINTEXT":
            raise UsageError(f"this command only speaks PLAINTEXT, not {protocol}")
    return Cluster.connect(bootstrap, timeout)
