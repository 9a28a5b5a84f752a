"""v2 consumer instances: one librdkafka consumer each, on its own single-thread executor (see
`strom.rest.v2.consumers` for the behaviour), and the set of them with idle expiry."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from starlette.requests import Request

from strom.rest.clients import rest_error_of
from strom.rest.context import RestContext
from strom.rest.errors import (
    CONSUMER_ALREADY_EXISTS,
    INVALID_CONSUMER_CONFIG,
    RestError,
)
from strom.rest.v2.requests import (
    CLOSE_AT_EXIT_S,
    EXCLUSIVE,
    INVALID_CONFIG,
    KAFKA_TIMEOUT_S,
    MAX_INSTANCES,
    PREFETCH_KIB,
    QUIET_ERRORS,
    SEEK_WAIT_S,
    InstanceConfig,
    illegal_state,
    invalid,
    not_found,
    python_regex,
)

log = logging.getLogger("strom.rest.v2.instances")
T = TypeVar("T")

# --------------------------------------------------------------------------- one instance


@dataclass
class Batch:
    """One read's records and its limits."""

    max_records: int
    max_bytes: int
    min_bytes: int  # -1: none (the read waits for its timeout)
    messages: list[Message] = field(default_factory=list)
    size: int = 0


def _size(msg: Message) -> int:
    key, value = msg.key(), msg.value()
    return (len(key) if key else 0) + (len(value) if value else 0)


class Instance:
    """A consumer instance; every method that touches `consumer` or `pending` runs on its
    executor (see `run`)."""

    def __init__(self, group: str, config: InstanceConfig, user: str | None,
                 consumer: Consumer, executor: concurrent.futures.ThreadPoolExecutor) -> None:
        self.group = group
        self.name = config.name
        self.config = config
        self.user = user
        self.consumer = consumer
        self.executor = executor
        self.used = time.monotonic()
        self.busy = 0  # requests in progress: an instance never expires under one
        self.closed = False
        self.pending: deque[Message] = deque()  # fetched, not yet handed out
        self.mode = "none"  # none | topics | pattern | assigned
        self.topics: list[str] = []
        self.pattern: re.Pattern[str] | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        """`fn` on this instance's thread; Kafka errors become Confluent's."""
        if self.closed:
            raise not_found()
        self.busy += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, fn)
        except KafkaException as exc:
            raise rest_error_of(exc) from None
        finally:
            self.busy -= 1
            self.used = time.monotonic()

    # ---- reads

    def fill(self, batch: Batch, wait_s: float) -> bool:
        """Add fetched records to `batch`, waiting up to `wait_s` for the first; True once the
        batch is complete."""
        if self.pending:
            self._drop_unassigned()
        if self._move(batch):
            return True
        room = batch.max_records - len(batch.messages)
        got: list[Message] = self.consumer.consume(room, 0)
        if not got and wait_s > 0:
            first = self.consumer.poll(wait_s)
            if first is not None:
                got = [first]
                if room > 1:
                    got += self.consumer.consume(room - 1, 0)
        for msg in got:
            err = msg.error()
            if err is None:
                self.pending.append(msg)
            elif err.code() in QUIET_ERRORS or err.retriable():
                log.debug("instance %s/%s: %s", self.group, self.name, err.str())
            elif not batch.messages and not self.pending:
                raise KafkaException(err)
            else:
                log.info("instance %s/%s: %s", self.group, self.name, err.str())
        return self._move(batch)

    def _move(self, batch: Batch) -> bool:
        while self.pending and len(batch.messages) < batch.max_records:
            size = _size(self.pending[0])
            if batch.messages and batch.size + size > batch.max_bytes:
                return True
            batch.messages.append(self.pending.popleft())
            batch.size += size
        return (len(batch.messages) >= batch.max_records or batch.size >= batch.max_bytes
                or (batch.min_bytes >= 0 and bool(batch.messages)
                    and batch.size >= batch.min_bytes))

    def _drop_unassigned(self) -> None:
        """Records of partitions a rebalance took away belong to their new owner now."""
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        kept = [m for m in self.pending if (m.topic(), m.partition()) in assigned]
        if len(kept) != len(self.pending):
            self.pending = deque(kept)

    def put_back(self, messages: list[Message]) -> None:
        self.pending.extendleft(reversed(messages))

    def store(self, messages: list[Message]) -> None:
        """Mark `messages` as handed out: what a commit without a body (or auto-commit)
        commits."""
        last: dict[tuple[str, int], int] = {}
        for msg in messages:
            topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
            if topic is not None and partition is not None and offset is not None:
                last[(topic, partition)] = offset
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in last.items()]
        if offsets:
            try:
                self.consumer.store_offsets(offsets=offsets)
            except KafkaException as exc:  # revoked meanwhile: its new owner reads them again
                log.debug("instance %s/%s: offsets not stored: %s", self.group, self.name, exc)

    # ---- offsets

    def commit(self, offsets: list[TopicPartition] | None, asynchronous: bool
               ) -> list[TopicPartition]:
        done: list[TopicPartition] | None = None
        try:
            if asynchronous and offsets is None:
                self.consumer.commit(asynchronous=True)
            elif asynchronous and offsets is not None:
                self.consumer.commit(offsets=offsets, asynchronous=True)
            elif offsets is None:
                done = self.consumer.commit(asynchronous=False)
            else:
                done = self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError._NO_OFFSET:
                return []  # nothing read since the last commit
            raise
        for tp in done or []:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return list(done or [])

    def committed(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        found = self.consumer.committed(partitions, timeout=KAFKA_TIMEOUT_S)
        return [tp for tp in found if tp.error is None and tp.offset >= 0]

    # ---- subscription and assignment

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        kind = "pattern" if pattern is not None else "topics"
        if self.mode not in ("none", kind):
            raise illegal_state(EXCLUSIVE)
        self.pending.clear()
        if pattern is None and not topics:
            self.unsubscribe()
            return
        if pattern is not None:
            try:  # librdkafka: a leading ^ makes a regex, of its own (POSIX-like) dialect
                self.consumer.subscribe([f"^({pattern})$"])
            except KafkaException as exc:
                raise invalid(f"'topic_pattern' is not a valid pattern: {exc}") from None
            self.pattern, self.topics = python_regex(pattern), []
        else:
            assert topics is not None
            self.consumer.subscribe(topics)
            self.pattern, self.topics = None, list(topics)
        self.mode = kind

    def unsubscribe(self) -> None:
        self.pending.clear()
        if self.mode == "assigned":
            self.consumer.unassign()
        elif self.mode != "none":
            self.consumer.unsubscribe()
        self.mode, self.topics, self.pattern = "none", [], None

    def subscription(self) -> list[str]:
        if self.mode == "topics":
            return list(self.topics)
        if self.mode == "pattern" and self.pattern is not None:
            meta = self.consumer.list_topics(timeout=KAFKA_TIMEOUT_S)
            return sorted(t for t in meta.topics if self.pattern.fullmatch(t))
        return []

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self.mode in ("topics", "pattern"):
            raise illegal_state(EXCLUSIVE)
        self.pending.clear()
        if partitions:
            self.consumer.assign(partitions)
            self.mode = "assigned"
        else:
            self.unsubscribe()

    def assignment(self) -> list[TopicPartition]:
        return sorted(self.consumer.assignment(), key=lambda tp: (tp.topic, tp.partition))

    # ---- positions

    def check_assigned(self, targets: list[TopicPartition]) -> None:
        assigned = {(tp.topic, tp.partition) for tp in self.consumer.assignment()}
        for tp in targets:
            if (tp.topic, tp.partition) not in assigned:
                raise illegal_state(f"No current assignment for partition "
                                    f"{tp.topic}-{tp.partition}")

    def seek(self, targets: list[TopicPartition]) -> None:
        """Move each partition's position (an offset, or OFFSET_BEGINNING)."""
        self.check_assigned(targets)
        moved = {(tp.topic, tp.partition) for tp in targets}
        self.pending = deque(m for m in self.pending if (m.topic(), m.partition()) not in moved)
        for tp in targets:
            self._seek_one(tp)

    def _seek_one(self, tp: TopicPartition) -> None:
        deadline = time.monotonic() + SEEK_WAIT_S
        while True:
            try:
                self.consumer.seek(tp)
                return
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.code() != KafkaError._STATE:
                    raise
                if self.mode == "assigned":  # not fetching yet: assign it again, positioned
                    self.consumer.incremental_unassign([TopicPartition(tp.topic, tp.partition)])
                    self.consumer.incremental_assign([tp])
                    return
                if time.monotonic() > deadline:
                    raise illegal_state(f"partition {tp.topic}-{tp.partition} cannot seek "
                                        "yet: read records first") from None
                time.sleep(0.01)  # the partition's fetcher is starting (a poll interval)

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.info("instance %s/%s: close: %s", self.group, self.name, exc)


# --------------------------------------------------------------------------- all instances


class Instances:
    """This process's consumer instances by (group, name), and their expiry."""

    def __init__(self, ctx: RestContext) -> None:
        self.ctx = ctx
        self.by_key: dict[tuple[str, str], Instance] = {}
        self.creating: set[tuple[str, str]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._exit_hook = False

    @property
    def timeout_s(self) -> float:
        return max(self.ctx.settings.consumer_timeout_ms, 1) / 1000

    def get(self, request: Request) -> Instance:
        key = (request.path_params["group_name"], request.path_params["instance"])
        found = self.by_key.get(key)
        if found is None or found.closed or found.user != self.ctx.user(request):
            raise not_found()
        found.used = time.monotonic()
        return found

    async def create(self, request: Request, group: str, config: InstanceConfig) -> Instance:
        key = (group, config.name)
        if key in self.by_key or key in self.creating:
            raise RestError(CONSUMER_ALREADY_EXISTS, "Consumer with specified consumer ID "
                            "already exists in the specified consumer group.", 409)
        if len(self.by_key) + len(self.creating) >= MAX_INSTANCES:
            raise RestError(429, f"This server holds {MAX_INSTANCES} consumer instances "
                            "already: delete some first", 429)
        user = self.ctx.user(request)
        extra: dict[str, Any] = {
            "group.id": group,
            "enable.auto.offset.store": False,
            "isolation.level": "read_uncommitted",  # the Java consumer's default, as Confluent's
            # records fetched ahead of reads, per instance: librdkafka's 64 MiB default times
            # MAX_INSTANCES could hold 64 GB; 16 MiB covers a read of rest.max.records.per.request
            # records of 1 KiB, refetched 10 ms after the queue drains (librdkafka waits 1 s)
            "queued.max.messages.kbytes": PREFETCH_KIB,
            "fetch.queue.backoff.ms": 10,
            # librdkafka leaves the group when not polled for this long: not before we expire
            "max.poll.interval.ms": min(max(300_000, int(self.timeout_s * 1000) + 30_000),
                                        86_400_000),
        }
        if config.auto_offset_reset is not None:
            extra["auto.offset.reset"] = ("error" if config.auto_offset_reset == "none"
                                          else config.auto_offset_reset)
        if config.auto_commit is not None:
            extra["enable.auto.commit"] = config.auto_commit
        conf = self.ctx.pool.config_for(user, **extra)
        self.creating.add(key)
        executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rest-consumer")
        try:
            consumer = await asyncio.get_running_loop().run_in_executor(
                executor, lambda: Consumer(conf))
        except KafkaException as exc:
            executor.shutdown(wait=False)
            raise invalid(f"{INVALID_CONFIG}{exc}", INVALID_CONSUMER_CONFIG) from None
        finally:
            self.creating.discard(key)
        found = self.by_key[key] = Instance(group, config, user, consumer, executor)
        self._start_sweeper()
        return found

    async def remove(self, instance: Instance) -> None:
        """Close it after the requests already queued on it (its last commit among them)."""
        key = (instance.group, instance.name)
        if self.by_key.get(key) is instance:
            del self.by_key[key]
        if instance.closed:
            return
        instance.closed = True
        try:
            await asyncio.get_running_loop().run_in_executor(instance.executor, instance.close)
        finally:
            instance.executor.shutdown(wait=False)

    def _start_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        if not self._exit_hook:
            atexit.register(self.close_all)
            self._exit_hook = True

    async def _sweep(self) -> None:
        interval = min(1.0, max(0.05, self.timeout_s / 4))
        while self.by_key:
            await asyncio.sleep(interval)  # the expiry check's period, not synchronisation
            now = time.monotonic()
            expired = [i for i in self.by_key.values()
                       if i.busy == 0 and now - i.used > self.timeout_s]
            await asyncio.gather(*(self._expire(i) for i in expired))

    async def _expire(self, instance: Instance) -> None:
        log.info("consumer instance %s/%s expired", instance.group, instance.name)
        try:
            await self.remove(instance)
        except Exception:  # one failed close must not stop the sweep
            log.exception("closing consumer instance %s/%s failed", instance.group,
                          instance.name)

    def close_all(self) -> None:
        """At exit: let each instance leave its group, within a bound (the broker may be
        gone)."""
        instances = list(self.by_key.values())
        self.by_key.clear()
        threads = [threading.Thread(target=i.close, daemon=True) for i in instances
                   if not i.closed]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + CLOSE_AT_EXIT_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
