"""Idempotent producers: lost responses are retried without duplicates, across restarts too."""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading

import pytest

from . import clients as kc
from .clients import Msg, read_partition
from .wire import Conn, Reader, Record, build_batch, i16, i32, i64, parse_batches

INIT_PRODUCER_ID = 22
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_REQUEST = 42
NOT_COORDINATOR = 16


# --------------------------------------------------------------------------- a lossy proxy


class DropProxy:
    """Forwards TCP connections to the broker and swallows the first ``drop`` Produce responses:
    the client's connection is closed instead, as if the network failed after the write."""

    def __init__(self, drop: int = 1) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.to_drop = drop
        self.dropped = 0
        self.produce_requests = 0
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            assert self.upstream is not None
            up = socket.create_connection(self.upstream, timeout=30)
            with self._lock:
                self._socks += [client, up]
            pending: dict[int, int] = {}
            threading.Thread(target=self._requests, args=(client, up, pending), daemon=True).start()
            threading.Thread(target=self._responses, args=(up, client, pending), daemon=True).start()

    @staticmethod
    def _frame(sock: socket.socket) -> bytes | None:
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return None
            head += chunk
        (size,) = struct.unpack(">i", head)
        body = bytearray()
        while len(body) < size:
            chunk = sock.recv(min(size - len(body), 1 << 16))
            if not chunk:
                return None
            body += chunk
        return head + bytes(body)

    @staticmethod
    def _close(*socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def _requests(self, client, up, pending) -> None:
        try:
            while (frame := self._frame(client)) is not None:
                api_key, _version, corr = struct.unpack_from(">hhi", frame, 4)
                pending[corr] = api_key
                if api_key == 0:
                    with self._lock:
                        self.produce_requests += 1
                up.sendall(frame)
        except OSError:
            pass
        self._close(client, up)

    def _responses(self, up, client, pending) -> None:
        try:
            while (frame := self._frame(up)) is not None:
                (corr,) = struct.unpack_from(">i", frame, 4)
                if pending.pop(corr, None) == 0:
                    with self._lock:
                        drop = self.dropped < self.to_drop
                        if drop:
                            self.dropped += 1
                    if drop:  # the broker wrote the batch; the client never hears about it
                        break
                client.sendall(frame)
        except OSError:
            pass
        self._close(client, up)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
        with self._lock:
            socks = list(self._socks)
        self._close(*socks)


@pytest.fixture
def proxied_broker(make_broker):
    proxy = DropProxy(drop=1)
    broker = make_broker({"advertised.listeners": f"PLAINTEXT://{proxy.bootstrap}"})
    proxy.upstream = ("127.0.0.1", broker.port)
    try:
        yield broker, proxy
    finally:
        proxy.close()


def test_librdkafka_retry_after_lost_response_writes_once(proxied_broker, unique_topic):
    broker, proxy = proxied_broker
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic)
    sent = [Msg(b"k%d" % (i % 7), b"message-%04d" % i) for i in range(300)]
    delivered = kc.produce(
        proxy.bootstrap, topic, sent, partition=0, enable_idempotence=True, acks="all",
        linger_ms=10, batch_num_messages=20, retry_backoff_ms=50,
    )  # fmt: skip
    assert proxy.dropped == 1, "the test must lose a produce response"
    assert proxy.produce_requests > 300 // 20  # the lost request(s) were sent again
    assert [d.offset for d in delivered] == list(range(len(sent)))  # original offsets reported
    got = read_partition(broker.bootstrap, topic)
    assert [(m.key, m.value) for m in got] == [(m.key, m.value) for m in sent]
    assert [m.offset for m in got] == list(range(len(sent)))


def test_kafka_python_retry_after_lost_response_writes_once(proxied_broker, unique_topic):
    broker, proxy = proxied_broker
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic)
    sent = [Msg(None, b"kp-%04d" % i) for i in range(120)]
    delivered = kc.kp_produce(proxy.bootstrap, topic, sent, enable_idempotence=True,
                              linger_ms=10, batch_size=1024, retry_backoff_ms=50)  # fmt: skip
    assert proxy.dropped == 1
    assert sorted(d.offset for d in delivered) == list(range(len(sent)))
    got = read_partition(broker.bootstrap, topic)
    assert [m.value for m in got] == [m.value for m in sent]


def test_idempotent_producers_write_producer_ids(strom_broker, unique_topic):
    topic = unique_topic()
    kc.create_topic(strom_broker.bootstrap, topic)
    sent = [Msg(b"k", b"v%d" % i) for i in range(50)]
    kc.produce(strom_broker.bootstrap, topic, sent, partition=0, enable_idempotence=True)
    kc.kp_produce(strom_broker.bootstrap, topic, sent, enable_idempotence=True)
    with Conn(strom_broker.bootstrap) as conn:
        fetched = conn.fetch(topic, 0, 0)
    heads = [h for h, _ in parse_batches(fetched.records)]
    pids = {h.producer_id for h in heads}
    assert len(pids) == 2 and all(p >= 0 for p in pids)  # one id per producer
    for pid in pids:
        seqs = [(h.base_sequence, h.count) for h in heads if h.producer_id == pid]
        assert seqs[0][0] == 0
        for (s1, n1), (s2, _n2) in itertools.pairwise(seqs):
            assert s2 == s1 + n1  # consecutive sequences, no gaps
    assert len(read_partition(strom_broker.bootstrap, topic)) == 100


# --------------------------------------------------------------------------- raw protocol


def init_producer_id(conn: Conn, transactional_id: str | None = None) -> tuple[int, int, int]:
    body = (i16(-1) if transactional_id is None else
            i16(len(transactional_id)) + transactional_id.encode()) + i32(60000)  # fmt: skip
    r = Reader(conn.request(INIT_PRODUCER_ID, 0, body))
    r.i32()  # throttle
    return r.i16(), r.i64(), r.i16()


def init_producer_id_v4(conn: Conn, producer_id: int, epoch: int) -> tuple[int, int, int]:
    body = b"\x00" + i32(60000) + i64(producer_id) + i16(epoch) + b"\x00"  # null txn id, no tags
    corr = conn.send(INIT_PRODUCER_ID, 4, body, flexible=True)
    r = Reader(conn.recv_response(corr, flexible_header=True))
    r.i32()
    return r.i16(), r.i64(), r.i16()


def idem_batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    recs = [Record(b"key", b"seq-%d" % (seq + i)) for i in range(n)]
    return build_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_init_producer_id(strom_broker):
    with Conn(strom_broker.bootstrap) as conn:
        e1, pid1, ep1 = init_producer_id(conn)
        e2, pid2, ep2 = init_producer_id(conn)
        assert (e1, e2, ep1, ep2) == (0, 0, 0, 0) and pid1 >= 0 and pid2 != pid1
        # an idempotent producer asking again with its id gets a fresh id (Kafka's rule)
        e3, pid3, ep3 = init_producer_id_v4(conn, pid1, 0)
        assert e3 == 0 and pid3 not in (pid1, pid2) and ep3 == 0
        assert init_producer_id_v4(conn, pid1, -1)[0] == INVALID_REQUEST
        # a transactional id goes to its coordinator; asking before FindCoordinator ran (and
        # created __transaction_state) gets NOT_COORDINATOR, as Kafka answers
        assert init_producer_id(conn, "txn-1")[0] == NOT_COORDINATOR


@pytest.mark.parametrize("kill", [False, True], ids=["clean-restart", "kill-9"])
def test_dedup_and_fencing_survive_restart(make_broker, unique_topic, kill):
    broker = make_broker({"log.segment.bytes": 600})  # several segments and snapshots
    topic = unique_topic()
    kc.create_topic(broker.bootstrap, topic)
    with Conn(broker.bootstrap) as conn:
        err, pid, epoch = init_producer_id(conn)
        assert err == 0
        sent = []
        for seq in range(0, 40, 2):
            batch = idem_batch(pid, epoch, seq)
            res = conn.produce(topic, 0, batch)
            assert res.error == 0 and res.base_offset == seq
            sent.append((batch, res.base_offset))
    broker.restart(kill=kill)
    with Conn(broker.bootstrap) as conn:
        for batch, offset in sent[-5:]:  # retries of the five in flight: deduplicated
            res = conn.produce(topic, 0, batch)
            assert (res.error, res.base_offset) == (0, offset)
        assert conn.list_offset(topic, 0, -1)[2] == 40  # nothing was written twice
        assert conn.produce(topic, 0, idem_batch(pid, epoch, 44)).error == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert conn.produce(topic, 0, idem_batch(pid, epoch, 40)).base_offset == 40
        assert conn.produce(topic, 0, idem_batch(pid, epoch + 1, 0)).base_offset == 42  # bump
        assert conn.produce(topic, 0, idem_batch(pid, epoch, 42)).error == INVALID_PRODUCER_EPOCH
    broker.restart(kill=kill)
    with Conn(broker.bootstrap) as conn:
        assert conn.produce(topic, 0, idem_batch(pid, epoch, 42)).error == INVALID_PRODUCER_EPOCH
        res = conn.produce(topic, 0, idem_batch(pid, epoch + 1, 0))
        assert (res.error, res.base_offset) == (0, 42)
    got = read_partition(broker.bootstrap, topic)
    assert [m.offset for m in got] == list(range(44))
