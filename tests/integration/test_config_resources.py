"""ListConfigResources (API 74) on the wire, with what Kafka 4.4 answers: v0 lists
client-metrics resources only, v1 the types asked for (all when none) in Kafka's fixed order,
and an unknown type fails the request with UNSUPPORTED_VERSION."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from . import clients as kc
from .wire import Conn
from .wire_flex import request, uvarint

pytestmark = pytest.mark.timeout(120)
API = 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
UNSUPPORTED_VERSION = 35


def _list(conn: Conn, version: int, types: list[int]) -> tuple[int, list[tuple[str, int | None]]]:
    body = b"\x00" if version == 0 else uvarint(len(types) + 1) + bytes(types) + b"\x00"
    data = request(conn, API, version, body)
    _, error = struct.unpack_from(">ih", data, 0)
    pos = 6

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return value

    out = []
    for _ in range(varint() - 1):
        size = varint() - 1
        name = data[pos:pos + size].decode()
        pos += size
        kind = None
        if version >= 1:
            kind = data[pos]
            pos += 1
        assert varint() == 0  # no tagged fields
        out.append((name, kind))
    return error, out


def test_list_config_resources_as_kafka_answers(strom_broker, unique_topic):
    bs = strom_broker.bootstrap
    topic, group = unique_topic("lcr"), unique_topic("lcr-g")
    kc.create_topic(bs, topic)
    entry = ConfigEntry("consumer.session.timeout.ms", "50000",
                        incremental_operation=AlterConfigOpType.SET)
    res = ConfigResource("GROUP", group, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bs})
    admin.incremental_alter_configs([res])[res].result(30)
    with Conn(bs) as conn:
        assert _list(conn, 0, []) == (0, [])  # no client-metrics subscriptions
        error, every = _list(conn, 1, [])
        assert error == 0
        kinds = [k for _, k in every]
        assert kinds == sorted(kinds, reverse=True)  # groups, ..., brokers, topics
        assert (group, GROUP) in every and (topic, TOPIC) in every
        assert ("0", BROKER) in every and ("0", BROKER_LOGGER) in every
        # the order of the types asked for does not matter; only they are listed
        error, some = _list(conn, 1, [TOPIC, BROKER])
        assert error == 0 and some == [r for r in every if r[1] in (BROKER, TOPIC)]
        assert _list(conn, 1, [GROUP]) == (0, [r for r in every if r[1] == GROUP])
        assert _list(conn, 1, [1]) == (UNSUPPORTED_VERSION, [])
        assert _list(conn, 1, [GROUP, 99]) == (UNSUPPORTED_VERSION, [])
