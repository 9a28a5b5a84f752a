"""The clients of a run, each in its own thread, each writing down what it was told.

- :class:`TxnProducer`: small transactions (1-3 records over the output partitions), most
  committed, some aborted on purpose.
- :class:`Processor`: consume-transform-produce in one consumer group, exactly-once: each batch
  read from the input topic is written to the output topic and its offsets committed with
  ``send_offsets_to_transaction`` (TxnOffsetCommit) in one transaction.
- :class:`OffsetWatcher`: the group's committed offsets (OffsetFetch, require_stable), polled.
- :class:`LiveReader`: a read_committed consumer of the transactional topics while the run goes.
- :func:`read_final`: every partition from its start to its end after the run.

The input topic's idempotent producer is faults.NumberedProducer (acks=all), shared with the
other fault tests. Client timeouts are short so that a dead broker is noticed in seconds.
"""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from ..integration.cluster.faults import NumberedProducer
from .history import (
    ABORTED,
    COMMITTED,
    FINAL,
    NO_OFFSET,
    UNKNOWN,
    OffsetCommit,
    OffsetRead,
    Read,
    Write,
    ctp_value,
)

CLIENT = {  # every client: notice a dead broker in seconds, find the new leaders quickly
    "socket.timeout.ms": 5000, "topic.metadata.refresh.interval.ms": 1000,
    "reconnect.backoff.max.ms": 500, "retry.backoff.ms": 100, "retry.backoff.max.ms": 500,
    "log_level": 2,  # librdkafka's own lines only from errors up: the run is full of them
}
TXN_TIMEOUT_MS = 10_000
OP_TIMEOUT = 10.0  # one transactional call (begin/send offsets/commit/abort)
COMMIT_DEADLINE = 30.0  # retrying a commit that failed with a retriable error
INIT_DEADLINE = 60.0


# librdkafka 2.16 can block send_offsets_to_transaction past its timeout when the group
# coordinator it cached left the cluster's metadata (confluentinc/librdkafka#5511, #5456): it
# waits for a state change of one of its broker connections, and no request is ever sent. Idle
# connections closed by the client are such changes (tests/integration/cluster/
# test_jepsen_clients.py); longer than socket.timeout.ms, so no awaited request is cut.
IDLE_CLOSE_MS = 10_000


def producer_config(bootstrap: str, transactional_id: str) -> dict:
    config = {**CLIENT, "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
              "transaction.timeout.ms": TXN_TIMEOUT_MS,
              "message.timeout.ms": TXN_TIMEOUT_MS - 1000, "request.timeout.ms": 5000,
              "linger.ms": 1, "connections.max.idle.ms": IDLE_CLOSE_MS}
    return {**config, **client_debug(transactional_id)}


def client_debug(name: str) -> dict:
    """JEPSEN_CLIENT_DEBUG=eos,protocol (librdkafka's debug contexts): the transactional
    clients log those to JEPSEN_CLIENT_LOG (default jepsen-clients.log), to see what a stuck
    client waits for. confluent-kafka hands such lines to a Python logger only from poll() and
    the like, late, and never the last ones of a client blocked in a call:
    JEPSEN_CLIENT_LOG=stderr has librdkafka write them itself, at once, with its own clock."""
    contexts = os.environ.get("JEPSEN_CLIENT_DEBUG")
    if not contexts:
        return {}
    if os.environ.get("JEPSEN_CLIENT_LOG") == "stderr":
        return {"debug": contexts, "log_level": 7}
    logger = logging.getLogger(f"jepsen.{name}")
    if not logger.handlers:
        handler = logging.FileHandler(os.environ.get("JEPSEN_CLIENT_LOG", "jepsen-clients.log"))
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return {"debug": contexts, "logger": logger, "log_level": 7}


def input_producer(bootstrap: str, topic: str, partitions: int, rate: int) -> NumberedProducer:
    """The idempotent acks=all producer of the input topic (values ``<partition>:<n>``)."""
    return NumberedProducer(bootstrap, topic, partitions, rate_per_s=rate, extra={
        **CLIENT, "request.timeout.ms": 5000, "message.timeout.ms": 60_000})


def input_writes(producer: NumberedProducer) -> list[Write]:
    """The input producer's records as writes: acknowledged ones committed, the rest unknown."""
    writes = [Write(f"in-{p}:{n}", (f"{p}:{n}",), COMMITTED, transactional=False)
              for p, numbers in producer.acked.items() for n in numbers]
    writes += [Write(f"in-{p}:{n}", (f"{p}:{n}",), UNKNOWN, transactional=False)
               for p, n, _ in producer.failed]
    return writes


class Worker:
    """A client thread; :meth:`stop` asks it to finish its current step and waits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.writes: list[Write] = []
        self.errors: list[str] = []  # client errors seen (for the report, not judged)
        self.commits_done = 0  # transactions committed so far (the nemesis strikes after one)
        self.pending: Write | None = None  # the transaction in flight, outcome unknown yet
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def ask_stop(self) -> None:
        self._stop.set()

    def stop(self, timeout: float = 60.0) -> None:
        """Ask the thread to stop and wait; one still running then is noted (as stuck, with
        where it is) and left behind (a daemon thread)."""
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            frame = sys._current_frames().get(self._thread.ident or -1)
            where = "".join(traceback.format_stack(frame)[-4:]) if frame else "?"
            self.errors.append(f"{self.name} stuck: still running {timeout:.0f} s after "
                               f"being asked to stop, at\n{where}")

    def history(self) -> list[Write]:
        """The writes, the one in flight (if stuck) as unknown."""
        return [*self.writes, *([self.pending] if self.pending is not None else [])]

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def committed(self) -> int:
        return self.commits_done

    def record(self, write: Write) -> None:
        self.pending = None
        self.writes.append(write)
        if write.outcome == COMMITTED:
            self.commits_done += 1

    def next_commit(self, timeout: float) -> bool:
        """Return right after this worker's next transaction commits (False: none did in
        ``timeout``); the nemesis's moment to strike."""
        seen = self.commits_done
        deadline = time.monotonic() + timeout
        while self.commits_done == seen:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)  # poll interval, not synchronisation
        return True

    def _guarded(self) -> None:
        try:
            self.run()
        except Exception as e:  # shown in the report; the history so far still counts
            self.errors.append(f"{self.name} crashed: {e!r}")

    def run(self) -> None:
        raise NotImplementedError

    def _note(self, e: BaseException) -> None:
        if len(self.errors) < 200:
            self.errors.append(f"{self.name}: {e}")

    def _new_producer(self, config: dict) -> Producer | None:
        """A transactional producer with init_transactions done (retried while the
        coordinator is away); None if asked to stop first."""
        deadline = time.monotonic() + INIT_DEADLINE
        while not self.stopping:
            producer = Producer(config)
            try:
                producer.init_transactions(OP_TIMEOUT)
                return producer
            except KafkaException as e:
                self._note(e)
                if time.monotonic() > deadline:
                    raise
        return None

    def _transaction(self, producer: Producer, body: Callable[[], None], commit: bool
                     ) -> tuple[str, bool]:
        """Run ``body`` (the produce calls) in a transaction, then commit or abort it.
        Returns the outcome and whether the producer can go on (False: make a new one)."""
        committing = False
        try:
            producer.begin_transaction()
            body()
            if not commit:
                producer.abort_transaction(OP_TIMEOUT)
                return ABORTED, True
            committing = True
            self._commit(producer)
            return COMMITTED, True
        except KafkaException as e:
            self._note(e)
            err = e.args[0]
            # never asked to commit: its records must never show, whatever happens next
            outcome = UNKNOWN if committing else ABORTED
            if err.fatal() or not err.txn_requires_abort():
                return outcome, False
            try:
                producer.abort_transaction(OP_TIMEOUT)
            except KafkaException as e2:
                self._note(e2)
                return outcome, False
            return outcome, True

    def _commit(self, producer: Producer) -> None:
        deadline = time.monotonic() + COMMIT_DEADLINE
        while True:
            try:
                producer.commit_transaction(OP_TIMEOUT)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                self._note(e)


class TxnProducer(Worker):
    """Transactions of 1-3 records ``tx:<txn>:<i>`` over the topic's partitions; a share of
    ``abort_ratio`` of them aborted on purpose."""

    def __init__(self, name: str, bootstrap: str, topic: str, partitions: int, seed: int,
                 abort_ratio: float, interval: float) -> None:
        super().__init__(name)
        self.config = producer_config(bootstrap, name)
        self.topic = topic
        self.partitions = partitions
        self.rng = random.Random(seed)
        self.abort_ratio = abort_ratio
        self.interval = interval

    def run(self) -> None:
        producer = None
        k = 0
        while not self._stop.wait(self.interval):
            if producer is None and (producer := self._new_producer(self.config)) is None:
                return
            txn = f"{self.name}.{k}"
            k += 1
            values = tuple(f"tx:{txn}:{i}" for i in range(self.rng.randint(1, 3)))
            parts = [self.rng.randrange(self.partitions) for _ in values]
            commit = self.rng.random() >= self.abort_ratio
            self.pending = Write(txn, values, UNKNOWN)

            def body(p=producer, values=values, parts=parts) -> None:
                for v, part in zip(values, parts, strict=True):
                    p.produce(self.topic, value=v.encode(), partition=part)

            outcome, usable = self._transaction(producer, body, commit)
            self.record(Write(txn, values, outcome))
            if not usable:
                producer = None


class Processor(Worker):
    """Consume-transform-produce: each batch of input records becomes output records
    ``ctp:<txn>:<in partition>:<in offset>`` and the batch's offsets are committed in the same
    transaction. After a transaction that did not commit, the consumer goes back to the
    group's committed offsets (a new consumer if it cannot)."""

    BATCH = 5

    def __init__(self, name: str, bootstrap: str, group: str, source: str, sink: str) -> None:
        super().__init__(name)
        self.bootstrap = bootstrap
        self.config = producer_config(bootstrap, name)
        self.group = group
        self.source = source
        self.sink = sink
        self.commits: list[OffsetCommit] = []

    def _consumer(self) -> Consumer:
        c = Consumer({**CLIENT, "bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      "isolation.level": "read_committed", "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 500, "max.poll.interval.ms": 60_000})
        c.subscribe([self.source])
        return c

    def run(self) -> None:
        consumer = self._consumer()
        producer = None
        k = 0
        try:
            while not self.stopping:
                if producer is None and (producer := self._new_producer(self.config)) is None:
                    return
                try:
                    msgs = [m for m in consumer.consume(self.BATCH, 0.5) if m.error() is None]
                except KafkaException as e:
                    self._note(e)
                    continue
                if not msgs:
                    continue
                txn = f"{self.name}.{k}"
                k += 1
                values = tuple(ctp_value(txn, m.partition(), m.offset()) for m in msgs)
                self.pending = Write(txn, values, UNKNOWN)
                ends: dict[int, int] = {}
                for m in msgs:
                    ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)

                def body(p=producer, c=consumer, msgs=msgs, values=values, ends=ends) -> None:
                    for m, v in zip(msgs, values, strict=True):
                        p.produce(self.sink, value=v.encode(), partition=m.partition())
                    offsets = [TopicPartition(self.source, part, o) for part, o in ends.items()]
                    p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(),
                                                  OP_TIMEOUT)

                outcome, usable = self._transaction(producer, body, commit=True)
                self.record(Write(txn, values, outcome))
                if outcome == COMMITTED:
                    at = time.monotonic()
                    self.commits += [OffsetCommit(part, o, at) for part, o in ends.items()]
                elif not self._rewind(consumer):
                    consumer.close()
                    consumer = self._consumer()
                if not usable:
                    producer = None
        finally:
            consumer.close()

    def _rewind(self, consumer: Consumer) -> bool:
        try:
            assigned = consumer.assignment()
            if assigned:
                for tp in consumer.committed(assigned, timeout=OP_TIMEOUT):
                    if tp.error is not None:
                        return False
                    if tp.offset < 0:
                        tp.offset = OFFSET_BEGINNING
                    consumer.seek(tp)
            return True
        except KafkaException as e:
            self._note(e)
            return False


class OffsetWatcher(Worker):
    """Reads the group's committed offsets of the input topic every ``interval`` seconds."""

    def __init__(self, bootstrap: str, group: str, topic: str, partitions: int,
                 interval: float = 0.3) -> None:
        super().__init__("offsets")
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.partitions = partitions
        self.interval = interval
        self.reads: list[OffsetRead] = []

    def run(self) -> None:
        reader = offsets_reader(self.bootstrap, self.group)
        try:
            while not self._stop.wait(self.interval):
                start = time.monotonic()
                try:
                    offsets = group_offsets(reader, self.topic, self.partitions)
                except KafkaException as e:
                    self._note(e)
                    continue
                end = time.monotonic()
                self.reads += [OffsetRead(p, o, start, end) for p, o in offsets.items()]
        finally:
            reader.close()


def offsets_reader(bootstrap: str, group: str) -> Consumer:
    """A consumer of ``group`` that never joins it, only asks for its committed offsets.

    OffsetFetch goes through the consumer, not AdminClient.list_consumer_group_offsets: with
    the group coordinator killed under it, librdkafka 2.16's admin request path aborted the
    whole process (rd_kafka_enq_once_del_source_return: eonce->refcnt > 0). read_committed
    makes librdkafka ask with require_stable (no offsets of a still open transaction)."""
    return Consumer({**CLIENT, "bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "isolation.level": "read_committed"})


def group_offsets(reader: Consumer, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of the partitions that answered without an error."""
    answer = reader.committed([TopicPartition(topic, p) for p in range(partitions)],
                              timeout=OP_TIMEOUT)
    return {tp.partition: max(tp.offset, NO_OFFSET) for tp in answer if tp.error is None}


class LiveReader(Worker):
    """A read_committed consumer of ``topics`` from their start, while the run goes on."""

    def __init__(self, bootstrap: str, topics: list[str], partitions: int) -> None:
        super().__init__("live-reader")
        self.consumer = Consumer({**CLIENT, "bootstrap.servers": bootstrap,
                                  "group.id": f"jepsen-live-{time.time_ns()}",
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING)
                              for t in topics for p in range(partitions)])
        self.reads: list[Read] = []

    def run(self) -> None:
        try:
            while not self.stopping:
                for m in self.consumer.consume(100, 0.5):
                    if m.error() is None:
                        self.reads.append(Read(m.topic(), m.partition(), m.offset(),
                                               m.value().decode(), self.name))
        finally:
            self.consumer.close()


def _ends(admin: AdminClient, topic: str, partitions: int, level: IsolationLevel
          ) -> dict[int, int]:
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    answer = admin.list_offsets(request, isolation_level=level, request_timeout=10)
    return {tp.partition: f.result(15).offset for tp, f in answer.items()}


def settle(admin: AdminClient, topics: list[str], partitions: int, timeout: float
           ) -> list[str]:
    """Wait until no transaction is open on ``topics`` (each partition's read_committed end is
    its log end); the partitions still open at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            open_ = []
            for t in topics:
                stable = _ends(admin, t, partitions, IsolationLevel.READ_COMMITTED)
                log_end = _ends(admin, t, partitions, IsolationLevel.READ_UNCOMMITTED)
                open_ += [f"{t}-{p}" for p in range(partitions) if stable[p] < log_end[p]]
        except KafkaException:
            open_ = ["(no answer)"]
        if not open_ or time.monotonic() > deadline:
            return open_
        time.sleep(0.5)  # poll interval, not synchronisation


def read_final(bootstrap: str, topics: list[str], partitions: int, timeout: float = 60.0
               ) -> list[Read]:
    """Every record of ``topics`` (read_committed) from the start to the read_committed end
    (taken first); raises if that end is not reached in time."""
    admin = AdminClient({**CLIENT, "bootstrap.servers": bootstrap})
    ends = {(t, p): o for t in topics
            for p, o in _ends(admin, t, partitions, IsolationLevel.READ_COMMITTED).items()}
    consumer = Consumer({**CLIENT, "bootstrap.servers": bootstrap,
                         "group.id": f"jepsen-final-{time.time_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
    reads: list[Read] = []
    position = dict.fromkeys(ends, 0)
    deadline = time.monotonic() + timeout
    try:
        while any(position[k] < ends[k] for k in ends):
            if time.monotonic() > deadline:
                behind = {k: (position[k], ends[k]) for k in ends if position[k] < ends[k]}
                raise AssertionError(f"final read stalled: (position, end) {behind}")
            for m in consumer.consume(500, 0.5):
                key = (m.topic(), m.partition())
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        position[key] = max(position[key], m.offset())
                        continue
                    raise AssertionError(f"final read: {m.error()}")
                reads.append(Read(m.topic(), m.partition(), m.offset(), m.value().decode(),
                                  FINAL))
                position[key] = max(position[key], m.offset() + 1)
    finally:
        consumer.close()
    return reads
