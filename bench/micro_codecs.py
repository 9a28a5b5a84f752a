"""Micro-benchmark: Strom's hand-tuned hot-path codecs against kio.

Run: ``.venv/bin/python -m bench.micro_codecs`` (or the file directly).
Prints a markdown table of microseconds per operation (best of several
repeats). "build+encode" cases include creating the message objects, since a
broker builds them for every response.
"""

from __future__ import annotations

import datetime
import io
import timeit
import uuid
from collections.abc import Callable

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as kfetch_req
from kio.schema.fetch.v12 import response as kfetch_resp
from kio.schema.metadata.v12 import response as kmeta_resp
from kio.schema.produce.v9 import request as kprod_req
from kio.schema.produce.v9 import response as kprod_resp
from kio.serial import entity_reader, entity_writer

from strom.protocol.fetch import (
    FetchPartitionResponse,
    FetchTopicResponse,
    decode_fetch_request,
    encode_fetch_response,
)
from strom.protocol.metadata import (
    MetadataBroker,
    MetadataPartition,
    MetadataTopic,
    encode_metadata_brokers,
    encode_metadata_response,
    encode_metadata_response_from_parts,
    encode_metadata_topic,
)
from strom.protocol.produce import (
    ProducePartitionResponse,
    ProduceTopicResponse,
    decode_produce_request,
    encode_produce_response,
)


def _serialize(entity: object) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def _usec(fn: Callable[[], object], min_time: float = 0.2, repeat: int = 5) -> float:
    timer = timeit.Timer(fn)
    number, elapsed = timer.autorange()
    number = max(1, int(number * min_time / max(elapsed, 1e-9)))
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e6


class _FileSlice:
    """Stands in for the (file, position, length) slice the fetch handler sends."""

    __slots__ = ("length", "position")

    def __init__(self, position: int, length: int) -> None:
        self.position = position
        self.length = length


def case_produce_parse() -> tuple[float, float]:
    req = kprod_req.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(milliseconds=30000),
        topic_data=(
            kprod_req.TopicProduceData(
                name="bench-topic",
                partition_data=(
                    kprod_req.PartitionProduceData(index=0, records=b"\x01" * (1 << 20)),
                ),
            ),
        ),
    )
    body = memoryview(_serialize(req)).toreadonly()
    reader = entity_reader(load_request_schema(0, 9))
    return _usec(lambda: reader(body, 0)), _usec(lambda: decode_produce_request(body, 9))


def case_produce_encode() -> tuple[float, float]:
    def kio_build() -> bytes:
        return _serialize(
            kprod_resp.ProduceResponse(
                responses=(
                    kprod_resp.TopicProduceResponse(
                        name="bench-topic",
                        partition_responses=(
                            kprod_resp.PartitionProduceResponse(
                                index=0,
                                error_code=ErrorCode.none,
                                base_offset=12345,
                                log_append_time=None,
                                log_start_offset=0,
                                record_errors=(),
                            ),
                        ),
                    ),
                ),
                throttle_time=datetime.timedelta(0),
            )
        )

    def ours() -> bytes:
        return encode_produce_response(
            9,
            [
                ProduceTopicResponse(
                    "bench-topic", None, [ProducePartitionResponse(0, 0, 12345, -1, 0)]
                )
            ],
        )

    assert kio_build() == ours()
    return _usec(kio_build), _usec(ours)


def case_fetch_parse() -> tuple[float, float]:
    req = kfetch_req.FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=(
            kfetch_req.FetchTopic(
                topic="bench-topic",
                partitions=tuple(
                    kfetch_req.FetchPartition(
                        partition=i,
                        current_leader_epoch=0,
                        fetch_offset=1000 * i,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1048576,
                    )
                    for i in range(10)
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    body = memoryview(_serialize(req)).toreadonly()
    reader = entity_reader(load_request_schema(1, 12))
    return _usec(lambda: reader(body, 0)), _usec(lambda: decode_fetch_request(body, 12))


def case_fetch_encode() -> tuple[float, float, float]:
    blob = b"\x02" * (100 * 1024)

    def kio_build() -> bytes:
        return _serialize(
            kfetch_resp.FetchResponse(
                throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none,
                session_id=0,
                responses=(
                    kfetch_resp.FetchableTopicResponse(
                        topic="bench-topic",
                        partitions=tuple(
                            kfetch_resp.PartitionData(
                                partition_index=i,
                                error_code=ErrorCode.none,
                                high_watermark=5000,
                                last_stable_offset=5000,
                                log_start_offset=0,
                                aborted_transactions=None,
                                preferred_read_replica=-1,
                                records=blob,
                            )
                            for i in range(10)
                        ),
                    ),
                ),
            )
        )

    def ours(make_records: Callable[[int], object]) -> tuple[list[object], int]:
        return encode_fetch_response(
            12,
            [
                FetchTopicResponse(
                    "bench-topic",
                    None,
                    [
                        FetchPartitionResponse(
                            i, 0, 5000, 5000, 0, None, -1, make_records(i), len(blob)
                        )
                        for i in range(10)
                    ],
                )
            ],
        )

    def opaque(i: int) -> object:
        return _FileSlice(i * len(blob), len(blob))

    def copied(_i: int) -> object:
        return blob

    expected = kio_build()
    parts, total = ours(opaque)
    assert total == len(expected) and len(parts) == 21
    assert b"".join(ours(copied)[0]) == expected
    return _usec(kio_build), _usec(lambda: ours(opaque)), _usec(lambda: ours(copied))


def case_metadata_encode() -> tuple[float, float, float, float, float]:
    topic_ids = [uuid.UUID(int=t + 1) for t in range(100)]

    def kio_entity() -> kmeta_resp.MetadataResponse:
        return kmeta_resp.MetadataResponse(
            throttle_time=datetime.timedelta(0),
            brokers=tuple(
                kmeta_resp.MetadataResponseBroker(node_id=b, host=f"broker-{b}", port=9092)
                for b in range(3)
            ),
            cluster_id="bench-cluster",
            controller_id=0,
            topics=tuple(
                kmeta_resp.MetadataResponseTopic(
                    error_code=ErrorCode.none,
                    name=f"topic-{t}",
                    topic_id=topic_ids[t],
                    is_internal=False,
                    partitions=tuple(
                        kmeta_resp.MetadataResponsePartition(
                            error_code=ErrorCode.none,
                            partition_index=p,
                            leader_id=p % 3,
                            leader_epoch=0,
                            replica_nodes=(p % 3, (p + 1) % 3, (p + 2) % 3),
                            isr_nodes=(p % 3, (p + 1) % 3, (p + 2) % 3),
                            offline_replicas=(),
                        )
                        for p in range(10)
                    ),
                )
                for t in range(100)
            ),
        )

    def kio_build() -> bytes:
        return _serialize(kio_entity())

    def build_topics() -> list[MetadataTopic]:
        return [
            MetadataTopic(
                0,
                f"topic-{t}",
                topic_ids[t],
                False,
                [
                    MetadataPartition(
                        0,
                        p,
                        p % 3,
                        0,
                        [p % 3, (p + 1) % 3, (p + 2) % 3],
                        [p % 3, (p + 1) % 3, (p + 2) % 3],
                        [],
                    )
                    for p in range(10)
                ],
            )
            for t in range(100)
        ]

    brokers = [MetadataBroker(b, f"broker-{b}", 9092) for b in range(3)]

    def ours() -> bytes:
        return encode_metadata_response(12, brokers, "bench-cluster", 0, build_topics())

    cached_topics = [encode_metadata_topic(12, t) for t in build_topics()]
    cached_brokers = encode_metadata_brokers(12, brokers)

    def ours_cached() -> bytes:
        return encode_metadata_response_from_parts(
            12, cached_brokers, "bench-cluster", 0, cached_topics
        )

    entity = kio_entity()
    topics = build_topics()

    def kio_encode_only() -> bytes:
        return _serialize(entity)

    def ours_encode_only() -> bytes:
        return encode_metadata_response(12, brokers, "bench-cluster", 0, topics)

    assert kio_build() == ours() == ours_cached() == kio_encode_only() == ours_encode_only()
    return (
        _usec(kio_build, min_time=0.5),
        _usec(ours),
        _usec(kio_encode_only, min_time=0.5),
        _usec(ours_encode_only),
        _usec(ours_cached),
    )


def main() -> None:
    assert load_response_schema(3, 12) is kmeta_resp.MetadataResponse
    rows = []
    k, o = case_produce_parse()
    rows.append(("parse Produce v9 carrying 1 MiB", k, o, "zero-copy records"))
    k, o = case_produce_encode()
    rows.append(("build+encode Produce v9 response (1 partition)", k, o, ""))
    k, o = case_fetch_parse()
    rows.append(("parse Fetch v12 request (10 partitions)", k, o, ""))
    k, o, c = case_fetch_encode()
    rows.append(
        (
            "build+encode Fetch v12 response, 10 x 100 KiB",
            k,
            o,
            f"opaque slices; {c:.1f} if records are bytes (copied)",
        )
    )
    k, o, ke, oe, c = case_metadata_encode()
    rows.append(
        (
            "build+encode Metadata v12, 100 topics x 10 partitions",
            k,
            o,
            f"{c:.1f} from cached topic bytes",
        )
    )
    rows.append(("encode only (objects prebuilt), same Metadata", ke, oe, ""))
    print("| case | kio 0.6.5 (us) | strom (us) | speed-up | note |")
    print("|---|---:|---:|---:|---|")
    for name, kio_us, ours_us, note in rows:
        print(f"| {name} | {kio_us:.1f} | {ours_us:.1f} | {kio_us / ours_us:.1f}x | {note} |")


if __name__ == "__main__":
    main()
