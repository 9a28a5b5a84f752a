"""The registry as a coordinator: its state lives in `_schemas`, its writer is that topic's leader.

Like the group, transaction and share coordinators it runs on the coordinator runtime
(`strom.coordinator.runtime`): when this broker becomes the leader of `_schemas-0`, the
partition is replayed into a fresh `RegistryState` a chunk at a time (the registry answers
"loading" meanwhile); when leadership leaves, the state is dropped. A change is appended as
Confluent's records, applied to the state with its append, and answered once the in-sync
replicas have it (`Commits.wait`): one writer, so ids are unique, and nothing acknowledged is
lost with a broker.

A broker that does not lead `_schemas-0` keeps a copy (`RegistryFollower`, fed by fetching
the topic from its leader): reads are answered from the copy, and a change raises Confluent's
50004 (unknown leader), which the HTTP layer forwards to the writer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from strom.coordinator.runtime.loader import ShardLoader
from strom.coordinator.runtime.store import Entry, StateRecord, StateStore
from strom.coordinator.runtime.timers import Scheduler
from strom.protocol.errors import ErrorCode, KafkaError
from strom.registry import errors as err
from strom.registry.follower import RegistryFollower, SchemasFeed, read_only_journal
from strom.registry.service import Registry
from strom.registry.state import SCHEMAS_TOPIC, Json, RegistryState, decode, encode

log = logging.getLogger("strom.registry")

PARTITION = 0  # `_schemas` has one partition: one ordered history, one writer


@dataclass
class RegistryShard:
    partition: int
    epoch: int
    state: RegistryState = field(default_factory=RegistryState)
    loader: Iterator[list[Entry]] | None = None
    loaded: bool = False


class _Journal:
    """The `Journal` of one shard: append to `_schemas-0`, wait for the commit, apply."""

    def __init__(self, store: StateStore, shard: RegistryShard) -> None:
        self._store = store
        self._shard = shard

    async def write(self, records: Sequence[tuple[Json, Json | None]]) -> None:
        raw = [(encode(k) or b"", encode(v)) for k, v in records]
        try:
            last = self._store.append(PARTITION, raw)
        except KafkaError as exc:
            if exc.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                raise err.unknown_leader("this broker no longer leads _schemas") from None
            raise err.store_error(exc.message or exc.code.name) from None
        # The state follows the log at once, as every coordinator's does: a write whose commit
        # times out stays in the log (it commits later, or a new leader reloads without it),
        # so the next id must already count it, or two schemas could get one id.
        for key, value in records:
            self._shard.state.apply(key, value)
        code = await self._store.commits.wait(SCHEMAS_TOPIC, PARTITION, last + 1)
        if code:
            raise err.store_timeout(f"the write to {SCHEMAS_TOPIC} was not committed "
                                    f"({ErrorCode(code).name})")


class RegistryCoordinator:
    """Owns the registry of the `_schemas` partition this broker leads."""

    def __init__(self, store: StateStore, scheduler: Scheduler, *,
                 max_schema_bytes: int) -> None:
        self.store = store
        self.max_schema_bytes = max_schema_bytes
        self.shards: dict[int, RegistryShard] = {}
        self._registries: dict[int, Registry] = {}
        self._loader: ShardLoader[RegistryShard, list[Entry]] = ShardLoader(
            self.shards, store.replay, scheduler, SCHEMAS_TOPIC, self)
        self._loaded = asyncio.Event()
        self.follower: RegistryFollower | None = None
        self._followed: Registry | None = None  # the follower's copy as a read-only registry

    # -- ShardHooks ------------------------------------------------------------------------

    def new_shard(self, partition: int, epoch: int) -> RegistryShard:
        return RegistryShard(partition, epoch)

    def replay_chunk(self, shard: RegistryShard, chunk: list[Entry]) -> None:
        for entry in chunk:
            if not isinstance(entry, StateRecord):
                continue  # the registry writes no transactions
            try:
                key = decode(entry.key)
                if key is not None:
                    shard.state.apply(key, decode(entry.value))
            except (ValueError, KeyError, TypeError) as exc:
                log.error("skipping an unreadable %s record at offset %d: %s", SCHEMAS_TOPIC,
                          entry.offset, exc)

    def loaded(self, shard: RegistryShard) -> None:
        shard.loaded = True
        self._registries[shard.partition] = Registry(shard.state, _Journal(self.store, shard),
                                                     max_schema_bytes=self.max_schema_bytes)
        log.info("schema registry loaded from %s-%d: %d subjects, %d schemas", SCHEMAS_TOPIC,
                 shard.partition, len(shard.state.subjects), len(shard.state.ids))
        self._loaded.set()

    def unload(self, shard: RegistryShard) -> None:
        self._registries.pop(shard.partition, None)
        self._loaded.clear()

    def on_leadership(self, partition: int, leader: bool, epoch: int = 0) -> None:
        if partition == PARTITION:
            self._loader.on_leadership(partition, leader, epoch)

    # -- for the HTTP layer ----------------------------------------------------------------

    def registry(self, write: bool = False) -> Registry:
        """The registry: the loaded one while this broker leads `_schemas`; otherwise, for
        reads, the follower's copy once it has caught up. Raises 50004 (unknown leader: ask
        the writer) or a loading error."""
        found = self._registries.get(PARTITION)
        if found is not None:
            return found
        if PARTITION in self.shards:
            raise err.store_timeout(f"the registry is loading {SCHEMAS_TOPIC}")
        follower = self.follower
        if not write and follower is not None and follower.ready:
            if self._followed is None or self._followed.state is not follower.state:
                self._followed = Registry(follower.state, read_only_journal(),
                                          max_schema_bytes=self.max_schema_bytes)
            return self._followed
        raise err.unknown_leader(f"this broker does not lead {SCHEMAS_TOPIC}")

    @property
    def following(self) -> bool:
        """True while reads are answered from a follower's copy (it may trail the writer)."""
        return PARTITION not in self._registries and self.follower is not None \
            and self.follower.ready

    async def sync(self, timeout_s: float) -> None:
        """Catch the follower's copy up with what the writer has committed now (nothing to do
        where this broker writes)."""
        if self.follower is not None and PARTITION not in self._registries:
            await self.follower.sync(timeout_s)

    def follow(self, feed: SchemasFeed) -> None:
        """Keep a copy of the registry from `feed` while another broker writes it."""
        if self.follower is None:
            self.follower = RegistryFollower(feed)
            self.follower.start()

    async def stop(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None

    async def wait_loaded(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._loaded.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
