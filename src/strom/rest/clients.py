"""The HTTP API's Kafka clients: one admin client and one producer per user, created on first
use and closed after `IDLE_S` unused.

librdkafka's calls block; admin results arrive as futures (awaited through `asyncio`), delivery
reports on a polling thread per producer that settles each record's asyncio future on the
event loop. Consumers (v2 instances, share consumers, event streams) are per instance and made by
their modules from `ClientPool.config_for`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import hashlib
import logging
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient

from strom.cluster.client import BrokerClient, BrokerConnectionError
from strom.protocol.codec import Struct
from strom.rest.errors import KAFKA_RETRIABLE_ERROR, RestError, kafka_error
from strom.security.client import ClientSecurity, SaslCredentials

log = logging.getLogger("strom.rest.clients")

IDLE_S = 600.0
ADMIN_TIMEOUT_S = 30.0
T = TypeVar("T")


def rest_error_of(exc: BaseException) -> RestError:
    """A librdkafka error (KafkaException or KafkaError) as Confluent's error body."""
    err = exc.args[0] if isinstance(exc, KafkaException) and exc.args else exc
    if isinstance(err, KafkaError):
        return kafka_error(err.code(), err.str(), err.retriable())
    return RestError(50001, str(exc) or type(exc).__name__, 500)


class ProducerBridge:
    """A librdkafka producer whose deliveries resolve asyncio futures, in produce order."""

    def __init__(self, conf: dict[str, Any], loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.producer = Producer(conf)
        self._closed = threading.Event()
        self._settled: list[tuple[asyncio.Future[Message], KafkaError | None, Message]] = []
        self._thread = threading.Thread(target=self._poll, name="rest-producer-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        """Delivery reports, handed to the event loop in one call per poll (not one per
        record: a wake-up of the loop costs more than settling a future)."""
        while not self._closed.is_set():
            self.producer.poll(0.05)
            if self._settled:
                batch, self._settled = self._settled, []
                self.loop.call_soon_threadsafe(_settle_all, batch)

    def _delivered(self, future: asyncio.Future[Message], err: KafkaError | None,
                   msg: Message) -> None:
        self._settled.append((future, err, msg))  # on the polling thread, inside poll()

    async def send(self, topic: str, *, value: bytes | None, key: bytes | None,
                   partition: int | None = None, headers: list[tuple[str, bytes]] | None = None,
                   timestamp: int | None = None) -> Message:
        """Produce one record and wait for its delivery report (raises RestError)."""
        return await (await self.submit(topic, value=value, key=key, partition=partition,
                                         headers=headers, timestamp=timestamp))

    async def submit(self, topic: str, *, value: bytes | None, key: bytes | None,
                     partition: int | None = None,
                     headers: list[tuple[str, bytes]] | None = None,
                     timestamp: int | None = None) -> asyncio.Future[Message]:
        """Queue one record (in call order: waits only while librdkafka's queue is full); the
        future it returns completes with the record's delivery report (or RestError)."""
        future: asyncio.Future[Message] = self.loop.create_future()
        kwargs: dict[str, Any] = {"value": value, "key": key,
                                  "on_delivery": functools.partial(self._delivered, future)}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = headers
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        deadline = time.monotonic() + ADMIN_TIMEOUT_S
        while True:
            try:
                self.producer.produce(topic, **kwargs)
                break
            except BufferError:  # librdkafka's queue is full: wait for deliveries (backpressure)
                if time.monotonic() > deadline:
                    raise RestError(50003, "the producer's queue stayed full", 500) from None
                await asyncio.sleep(0.005)  # poll interval, not synchronisation
            except KafkaException as exc:
                raise rest_error_of(exc) from None
        return future

    def close(self) -> None:
        self.producer.flush(10)
        self._closed.set()
        self._thread.join(1.0)


def _settle_all(batch: list[tuple[asyncio.Future[Message], KafkaError | None, Message]]) -> None:
    for future, err, msg in batch:
        if future.done():
            continue
        if err is not None:
            future.set_exception(kafka_error(err.code(), err.str(), err.retriable()))
        else:
            future.set_result(msg)


@dataclass
class UserClients:
    config: dict[str, Any]
    secret: bytes  # a hash of the credentials these clients were made with
    loop: asyncio.AbstractEventLoop
    used: float = field(default_factory=time.monotonic)
    tls: ssl.SSLContext | None = None  # to a TLS listener (`LoopbackTls`)
    _admin: AdminClient | None = None
    _producer: ProducerBridge | None = None
    _raw: BrokerClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.config)
        return self._admin

    @property
    def producer(self) -> ProducerBridge:
        if self._producer is None:
            self._producer = ProducerBridge(
                {**self.config, "acks": "all", "linger.ms": 5}, self.loop)
        return self._producer

    async def call(self, start: Callable[[AdminClient], concurrent.futures.Future[T]]) -> T:
        """One admin call whose result is a single future."""
        try:
            return await asyncio.wrap_future(start(self.admin))
        except KafkaException as exc:
            raise rest_error_of(exc) from None

    async def blocking(self, fn: Callable[[], T]) -> T:
        """A blocking librdkafka call (list_topics, describe...) off the event loop."""
        try:
            return await asyncio.to_thread(fn)
        except KafkaException as exc:
            raise rest_error_of(exc) from None

    async def request(self, api_key: int, version: int, body: dict[str, Any]) -> Struct:
        """A Kafka request librdkafka has no call for (ListPartitionReassignments), to this
        process's broker with the same credentials as the user's other clients."""
        if self._raw is None:
            host, port = self.config["bootstrap.servers"].split(",")[0].rsplit(":", 1)
            sasl = None
            if self.config.get("security.protocol", "").startswith("SASL_"):
                sasl = SaslCredentials(self.config.get("sasl.mechanism", "PLAIN"),
                                       self.config["sasl.username"], self.config["sasl.password"])
            self._raw = BrokerClient(host.strip("[]"), int(port), client_id="strom-rest",
                                     timeout_s=ADMIN_TIMEOUT_S,
                                     security=ClientSecurity(ssl_context=self.tls, sasl=sasl))
        try:
            return await self._raw.request(api_key, version, body)
        except BrokerConnectionError as exc:
            raise RestError(KAFKA_RETRIABLE_ERROR, str(exc), 500) from None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()
        if self._raw is not None:
            self._raw.close()
        self._admin = self._producer = self._raw = None


class ClientPool:
    """Kafka clients by HTTP user (None: no authentication)."""

    def __init__(self, base: dict[str, Any], mechanism_of: Callable[[str], str | None],
                 tls: ssl.SSLContext | None = None) -> None:
        self.base = base
        self.tls = tls
        self.mechanism_of = mechanism_of  # the SASL mechanism a user authenticated with
        self._users: dict[str | None, UserClients] = {}
        self._passwords: dict[str, str] = {}

    def remember(self, user: str, password: str) -> None:
        """Credentials that just passed the broker's check: the user's clients use them."""
        self._passwords[user] = password

    def password_of(self, user: str) -> str | None:
        return self._passwords.get(user)

    def config_for(self, user: str | None, **extra: Any) -> dict[str, Any]:
        conf = dict(self.base)
        if user is not None:
            conf["sasl.username"] = user
            conf["sasl.password"] = self._passwords.get(user, "")
            mechanism = self.mechanism_of(user)
            if mechanism is not None:
                conf["sasl.mechanism"] = mechanism
        conf.update(extra)
        return conf

    def clients(self, user: str | None) -> UserClients:
        conf = self.config_for(user)
        secret = hashlib.sha256(repr(sorted(conf.items())).encode()).digest()
        found = self._users.get(user)
        if found is not None and found.secret != secret:  # new password: new clients
            found.close()
            found = None
        if found is None:
            found = self._users[user] = UserClients(conf, secret, asyncio.get_running_loop(),
                                                    tls=self.tls)
        found.used = time.monotonic()
        return found

    def close_idle(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for user, clients in list(self._users.items()):
            if now - clients.used > IDLE_S:
                del self._users[user]
                clients.close()

    def close(self) -> None:
        for clients in self._users.values():
            clients.close()
        self._users.clear()


async def run_periodically(interval_s: float, fn: Callable[[], Awaitable[None] | None]) -> None:
    while True:
        await asyncio.sleep(interval_s)  # a period, not synchronisation
        try:
            result = fn()
            if result is not None:
                await result
        except Exception:  # keep going: one failed sweep must not stop the next
            log.exception("periodic task failed")
