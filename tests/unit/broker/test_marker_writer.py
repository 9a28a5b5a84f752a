"""ClusterMarkerWriter reports every partition's outcome exactly once, a failure too: a marker
write whose `done` is never called would leave its transaction in PrepareCommit/PrepareAbort
for good (nothing retries it, nothing times it out)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from strom.broker.markers import ClusterMarkerWriter
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.coordinator.transaction.markers import DONE_CODES, GIVE_UP_CODES, TxnMarker
from strom.protocol.errors import ErrorCode as E
from strom.security.client import PLAINTEXT


def _writer() -> ClusterMarkerWriter:
    topic = TopicState("t", uuid.uuid4(), {p: PartitionState(p, [1, leader], [1, leader], leader)
                                           for p, leader in ((0, 2), (1, 3))})
    image = MetadataImage("c", brokers={b: BrokerInfo(b, "127.0.0.1", 9000 + b) for b in (1, 2, 3)},
                          topics={"t": topic})
    config = SimpleNamespace(get=lambda name: 30_000)
    node = SimpleNamespace(broker_id=1, image=image, config=config, inter_broker=PLAINTEXT)
    return ClusterMarkerWriter(node, groups=None)  # type: ignore[arg-type]


def test_a_failed_write_is_reported_and_retried_not_lost() -> None:
    async def scenario() -> list[dict]:
        writer = _writer()

        async def send(leader, marker, tps):
            if leader == 2:
                raise RuntimeError("a bug on the way to broker 2")
            return dict.fromkeys(tps, E.NONE)

        writer._send = send  # type: ignore[method-assign]
        reported: list[dict] = []
        writer.write(TxnMarker(7, 0, 0, True, (("t", 0), ("t", 1)), "tid"), reported.append)
        for _ in range(20):
            if reported:
                break
            await asyncio.sleep(0)
        writer.close()
        return reported

    reported = asyncio.run(scenario())
    assert reported == [{("t", 0): E.UNKNOWN_SERVER_ERROR, ("t", 1): E.NONE}]
    # the transaction coordinator retries it (neither written nor given up)
    assert E.UNKNOWN_SERVER_ERROR not in DONE_CODES | GIVE_UP_CODES
