"""Capture the fuzz seed corpus: the request frames real clients send to a real broker.

Starts a ``strom broker`` that advertises a recording TCP proxy on 127.0.0.1 (so clients reach it
through the proxy on every connection, not only the bootstrap one), drives confluent-kafka,
kafka-python and aiokafka through their usual paths (idempotent and transactional producers,
consumer groups of both protocols, admin calls) and writes each distinct request frame (header and
body, without the 4-byte size prefix) to ``tests/fuzz/corpus/`` as
``<api key>-<api name>-v<version>-<client>-<n>.bin``. Run it with ``make fuzz-seeds``; the suite
reads the committed files and never recaptures.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.integration.broker import HOST, BrokerProcess, free_port

from strom.protocol.api_keys import ApiKey

CORPUS = Path(__file__).resolve().parent / "corpus"
MAX_FRAME = 4096  # larger frames (big produce batches) add size, not shapes
PER_KEY = 2  # distinct frames kept per (api key, version, client)
PER_PRODUCE = 10  # Produce: enough for a batch of every compression codec


class RecordingProxy:
    """Forwards 127.0.0.1:port to the broker and records every client-to-broker frame."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.port = free_port()
        self.client = "none"
        self.frames: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server((HOST, self.port))
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        self._stopped = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return
            up = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, record: bool) -> None:
        pending = b""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if record:
                    pending = self._split(pending + data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def _split(self, buf: bytes) -> bytes:
        """Record the complete frames in buf; return the incomplete rest."""
        while len(buf) >= 4:
            (size,) = struct.unpack_from(">i", buf)
            if len(buf) < 4 + size:
                break
            with self._lock:
                self.frames.append((self.client, buf[4 : 4 + size]))
            buf = buf[4 + size :]
        return buf


# --------------------------------------------------------------------------- client scenarios


def confluent(bootstrap: str) -> None:
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        Producer,
        TopicCollection,
        TopicPartition,
    )
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("seed-a", 2, 1), NewTopic("seed-b", 1, 1, config={"retention.ms": "60000"})]
    for f in admin.create_topics(topics).values():
        f.result(30)
    for f in admin.describe_configs([ConfigResource(ResourceType.TOPIC, "seed-a"),
                                     ConfigResource(ResourceType.BROKER, "0")]).values():
        f.result(30)
    resource = ConfigResource(ResourceType.TOPIC, "seed-b", incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([resource]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions("seed-b", 2)]).values():
        f.result(30)
    admin.describe_cluster().result(30)
    for f in admin.describe_topics(TopicCollection(["seed-a"])).values():
        f.result(30)

    for compression in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "compression.type": compression, "linger.ms": 5})
        for i in range(5):
            p.produce("seed-a", key=f"k{i}".encode(), value=b"v" * 40 * i,
                      headers=[("h", b"x"), ("n", None)], partition=i % 2)
        assert p.flush(30) == 0

    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": "seed-tx"})
    tx.init_transactions(30)
    tx.begin_transaction()
    tx.produce("seed-a", key=b"t", value=b"in a transaction", partition=0)
    offsets_of = Consumer({"bootstrap.servers": bootstrap, "group.id": "seed-tx-group"})
    tx.send_offsets_to_transaction([TopicPartition("seed-a", 0, 1)],
                                   offsets_of.consumer_group_metadata(), 30)
    offsets_of.close()
    tx.commit_transaction(30)
    tx.begin_transaction()
    tx.produce("seed-a", key=b"t", value=b"aborted", partition=1)
    tx.abort_transaction(30)

    for protocol in ("classic", "consumer"):
        group = f"seed-group-{protocol}"
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "group.protocol": protocol,
                "isolation.level": "read_committed"}
        if protocol == "classic":
            conf["session.timeout.ms"] = 6000
        c = Consumer(conf)
        c.subscribe(["seed-a"])
        got = 0
        deadline = time.monotonic() + 30
        while got < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
                c.commit(m, asynchronous=False)
        c.committed([TopicPartition("seed-a", 0)], 10)
        c.close()

    admin.list_consumer_groups().result(30)
    admin.describe_consumer_groups(["seed-group-classic"])["seed-group-classic"].result(30)
    admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("seed-group-classic")])[
        "seed-group-classic"].result(30)
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest(), OffsetSpec.max_timestamp()):
        for f in admin.list_offsets({TopicPartition("seed-a", 0): spec}).values():
            f.result(30)
    for f in admin.delete_records([TopicPartition("seed-a", 0, 1)]).values():
        f.result(30)
    for f in admin.delete_consumer_groups(["seed-group-classic"]).values():
        f.result(30)
    for f in admin.delete_topics(["seed-b"]).values():
        f.result(30)


def kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("seed-kp", 1, 1)])
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "seed-kp")])
    p = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    for i in range(3):
        p.send("seed-kp", key=b"k%d" % i, value=b"kafka-python", headers=[("h", b"1")])
    p.flush(30)
    p.close()
    c = KafkaConsumer("seed-kp", bootstrap_servers=bootstrap, group_id="seed-kp-group",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      consumer_timeout_ms=10000)
    for got, _ in enumerate(c, 1):
        if got >= 3:
            break
    c.commit()
    c.close()
    admin.delete_topics(["seed-kp"])
    admin.close()


def aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await p.start()
        try:
            for i in range(3):
                await p.send_and_wait("seed-a", b"aiokafka %d" % i, key=b"a", partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer("seed-a", bootstrap_servers=bootstrap, group_id="seed-aio-group",
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        try:
            await c.getmany(timeout_ms=5000, max_records=3)
            await c.commit()
        finally:
            await c.stop()

    asyncio.run(run())


SCENARIOS: dict[str, Callable[[str], None]] = {
    "confluent": confluent,
    "kafkapython": kafka_python,
    "aiokafka": aiokafka,
}


# --------------------------------------------------------------------------- writing the corpus


def select(frames: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """File name -> frame: up to PER_KEY distinct small frames per (api, version, client)."""
    kept: dict[tuple[int, int, str], list[bytes]] = {}
    for client, frame in frames:
        if len(frame) < 8 or len(frame) > MAX_FRAME:
            continue
        api, version = struct.unpack_from(">hh", frame)
        bucket = kept.setdefault((api, version, client), [])
        # Two frames differing only in the correlation id are the same shape.
        if len(bucket) < (PER_PRODUCE if api == ApiKey.PRODUCE else PER_KEY) and all(f[8:] != frame[8:] for f in bucket):
            bucket.append(frame)
    out = {}
    for (api, version, client), bucket in sorted(kept.items()):
        name = ApiKey(api).name.lower() if api in ApiKey._value2member_map_ else f"api{api}"
        for n, frame in enumerate(bucket):
            out[f"{api:02d}-{name}-v{version}-{client}-{n}.bin"] = frame
    return out


def main() -> int:
    base = Path(tempfile.mkdtemp(prefix="strom-fuzz-seeds-"))
    broker = BrokerProcess(base, name="seed-broker")
    proxy = RecordingProxy((HOST, broker.port))
    broker.start({"advertised.listeners": f"PLAINTEXT://{HOST}:{proxy.port}",
                  "auto.create.topics.enable": "true", "group.initial.rebalance.delay.ms": "0"})
    try:
        for client, scenario in SCENARIOS.items():
            proxy.client = client
            scenario(f"{HOST}:{proxy.port}")
    finally:
        proxy.stop()
        broker.stop()
    files = select(proxy.frames)
    CORPUS.mkdir(exist_ok=True)
    for old in CORPUS.glob("*.bin"):
        old.unlink()
    for name, frame in files.items():
        (CORPUS / name).write_bytes(frame)
    total = sum(len(f) for f in files.values())
    print(f"{len(files)} seed frames, {total} bytes, from {len(proxy.frames)} captured, in {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
