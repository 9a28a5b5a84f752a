"""BrokerClient, the inter-broker connection (Raft, replica fetches, the controller channel):
a peer that drops the connection between two requests costs at most that request, never the
connection for good. Found by the long Jepsen run: after a network partition healed, uvloop
raised RuntimeError writing to the closed transport, which BrokerClient did not take for a lost
connection; it kept the dead writer, and every later Raft request to that peer failed the same
way (the node could not follow the quorum's leader until restarted)."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import response_codec
from strom.protocol.header import decode_request_header, encode_response_header

DEADLINE_S = 10.0


async def _serve_one_answer_per_connection() -> tuple[asyncio.Server, list[int]]:
    """A server answering ApiVersions once on each connection, then closing it."""
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer(reader, writer, served)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, served


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_connection_the_peer_closed_is_replaced_by_the_next_request(loop: str) -> None:
    async def main() -> None:
        server, served = await _serve_one_answer_per_connection()
        client = BrokerClient("127.0.0.1", server.sockets[0].getsockname()[1], client_id="t",
                              timeout_s=5)
        outcomes = []
        for _ in range(6):
            try:
                await client.request(ApiKey.API_VERSIONS, 3, BODY)
                outcomes.append("answer")
            except BrokerConnectionError:
                outcomes.append("lost")
            await _peer_gone(client)
        client.close()
        server.close()
        await server.wait_closed()
        # before: every second request went out on the closed connection and failed
        assert outcomes == ["answer"] * 6
        assert len(served) == 6

    _run(loop, main)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_connection_the_peer_reset_while_idle_is_replaced(loop: str) -> None:
    """The Jepsen case: the reset arrives between two requests (uvloop then closes the
    transport under the writer BrokerClient keeps)."""
    async def main() -> None:
        reset_now = asyncio.Event()
        served: list[int] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await _answer(reader, writer, served)
            await reset_now.wait()
            reset_now.clear()
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        client = BrokerClient("127.0.0.1", server.sockets[0].getsockname()[1], client_id="t",
                              timeout_s=5)
        for _ in range(4):
            await client.request(ApiKey.API_VERSIONS, 3, BODY)
            reset_now.set()
            await _peer_gone(client)
        client.close()
        server.close()
        await server.wait_closed()
        assert len(served) == 4

    _run(loop, main)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  served: list[int]) -> None:
    """Read one ApiVersions request and answer it."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    header, _ = decode_request_header(memoryview(frame), 0, 2)
    codec = response_codec(ApiKey.API_VERSIONS, 3)
    body = encode_response_header(header.correlation_id, codec.header_version) + \
        codec.encode({"error_code": 0, "api_keys": [], "throttle_time_ms": 0})
    writer.write(struct.pack(">i", len(body)) + body)
    await writer.drain()
    served.append(header.correlation_id)


async def _peer_gone(client: BrokerClient) -> None:
    """Poll (with a deadline) until the client's connection has seen the peer's close or
    reset, so the next request starts on a connection the peer has left."""
    reader = client._reader
    deadline = asyncio.get_running_loop().time() + 5
    while reader is not None and not (reader.at_eof() or reader.exception()):
        assert asyncio.get_running_loop().time() < deadline, "the peer's close never came"
        await asyncio.sleep(0.01)  # poll interval


BODY = {"client_software_name": "t", "client_software_version": "1"}


def _run(loop: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    runner = uvloop.run if loop == "uvloop" else asyncio.run
    runner(asyncio.wait_for(main(), DEADLINE_S))
