"""The ZooKeeper mirror: keeps this broker's metadata image equal to what ZooKeeper holds.

It reads Kafka's znodes (live brokers, controller, topics with their partition states, topic and
broker configs, the producer id block), compares them with the image and turns every difference
into the same metadata records the single node's log holds (`cluster/records.py`). The records
are applied with `records.apply` and the resulting `Change`s go to the subscribers (the
partition manager, the coordinators, replication), all in the event loop thread.

Watches drive it: every znode read is read with a watch, and a watch event marks the thing it
concerns dirty; one worker task re-reads dirty things in batches, so events never interleave
half-applied. On every (re)connection of the session, and every `resync_interval_s` as a
safety net, it re-reads everything.

Stale reads are harmless: a partition state is applied only when its znode version (the
partition epoch) is not older than the one in the image.

Unreadable is not gone: a topic whose znode cannot be decoded (or a missing /brokers/topics)
keeps what the image has, since removing it from the image deletes its logs. `incomplete()`
says when the image may lack topics ZooKeeper holds, so no local directory is judged stray.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from strom.cluster import quotas
from strom.cluster import records as rec
from strom.cluster.decisions import NO_LEADER, NO_STATE
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState
from strom.cluster.records import Change
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.client import ZkClient
from strom.common.tasks import cancel_all
from strom.security.acl import AclBinding

log = logging.getLogger(__name__)

Listener = Callable[[list[Change]], None]
Key = tuple[Any, ...]
Quotas = dict[quotas.QuotaEntity, dict[str, float]]

FULL: Key = ("full",)
BROKERS: Key = ("brokers",)
CONTROLLER: Key = ("controller",)
TOPICS: Key = ("topics",)
BROKER_CONFIGS: Key = ("broker_configs",)
# /config/users and /config/clients: users' configs (SCRAM credentials) and client quotas
USER_CONFIGS: Key = ("user_configs",)
GROUP_CONFIGS: Key = ("group_configs",)  # /config/groups (Strom's own, see znodes)
ACLS: Key = ("acls",)
STATES_PER_SLICE = 100  # partition-state changes applied in one go (see _apply_in_slices)


def key_for(path: str) -> Key | None:
    """What a watch event on `path` makes dirty (None: nothing the mirror reads)."""
    if path == zn.BROKER_IDS or path.startswith(zn.BROKER_IDS + "/"):
        return BROKERS
    if path in (zn.CONTROLLER, zn.CONTROLLER_EPOCH):
        return CONTROLLER
    if path == zn.TOPICS:
        return TOPICS
    if path.startswith(zn.TOPICS + "/"):
        parts = path[len(zn.TOPICS) + 1:].split("/")
        if len(parts) == 4 and parts[1] == "partitions" and parts[3] == "state":
            try:
                return ("state", parts[0], int(parts[2]))
            except ValueError:
                return None
        return ("topic", parts[0])
    if path == zn.CONFIG_BROKERS or path.startswith(zn.CONFIG_BROKERS + "/"):
        return BROKER_CONFIGS
    if path == zn.ACLS:
        return ACLS
    if path == zn.CONFIG_GROUPS or path.startswith(zn.CONFIG_GROUPS + "/"):
        return GROUP_CONFIGS
    for parent in (zn.CONFIG_USERS, zn.CONFIG_CLIENTS):
        if path == parent or path.startswith(parent + "/"):
            return USER_CONFIGS
    if path.startswith(zn.CONFIG_TOPICS + "/"):
        return ("topic_config", path[len(zn.CONFIG_TOPICS) + 1:].split("/")[0])
    return None


@dataclass
class TopicSnapshot:
    name: str
    topic_id: Any
    partitions: dict[int, PartitionState]
    configs: dict[str, str]


class Unreadable:
    """A topic znode that is there but cannot be decoded: the image keeps what it has."""


UNREADABLE = Unreadable()
TopicRead = TopicSnapshot | Unreadable | None  # None: gone


def state_from(partition: int, replicas: list[int],
               read: tuple[zn.LeaderAndIsr, int] | None, adding: list[int] | None = None,
               removing: list[int] | None = None) -> PartitionState:
    """The image's PartitionState for a state znode (None: not created yet by the controller)
    and the partition's assignment in its topic znode."""
    moving = list(adding or ()), list(removing or ())
    if read is None:
        return PartitionState(partition, list(replicas), [], NO_LEADER, NO_STATE, NO_STATE,
                              adding_replicas=moving[0], removing_replicas=moving[1])
    state, version = read
    return PartitionState(partition, list(replicas), list(state.isr), state.leader,
                          state.leader_epoch, version, adding_replicas=moving[0],
                          removing_replicas=moving[1])


def partition_update_needed(current: PartitionState | None, desired: PartitionState) -> bool:
    """Apply `desired` unless it is what the image has, or older (a stale read)."""
    if current is None:
        return True
    if desired.partition_epoch < current.partition_epoch:
        return False
    return desired != current


def entity_config_records(resource: str, current: dict[str, dict[str, str]],
                          desired: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """Records turning every entity's configs (brokers or users) from `current` into
    `desired`."""
    out: list[dict[str, Any]] = []
    for entity in sorted(set(desired) | set(current)):
        out += config_records(resource, entity, current.get(entity, {}), desired.get(entity, {}))
    return out


def config_records(resource: str, name: str, current: dict[str, str],
                   desired: dict[str, str]) -> list[dict[str, Any]]:
    out = [rec.config_record(resource, name, k, v) for k, v in sorted(desired.items())
           if current.get(k) != v]
    out += [rec.config_record(resource, name, k, None) for k in sorted(current)
            if k not in desired]
    return out


def quota_records(current: Quotas, desired: Quotas) -> list[dict[str, Any]]:
    """Records turning the client quotas `current` into `desired`."""
    out: list[dict[str, Any]] = []
    for entity in sorted(set(current) | set(desired), key=repr):
        have, want = current.get(entity, {}), desired.get(entity, {})
        out += [rec.client_quota_record(entity, k, v) for k, v in sorted(want.items())
                if have.get(k) != v]
        out += [rec.client_quota_record(entity, k, None) for k in sorted(have) if k not in want]
    return out


class ZkMirror:
    def __init__(self, zk: ZkClient, image: MetadataImage, *,
                 resync_interval_s: float = 30.0, inter_broker: str = "PLAINTEXT",
                 own_broker: int | None = None,
                 record_sink: Callable[[list[dict[str, Any]]], None] | None = None) -> None:
        self.zk = zk
        # sees every record before the image does: a KRaft controller migrating a ZooKeeper
        # cluster copies them into its metadata log (strom.controller.zk_migration)
        self.record_sink = record_sink
        self.image = image
        self.inter_broker = inter_broker  # the listener whose address brokers reach each other on
        self.resync_interval_s = resync_interval_s
        self._listeners: list[Listener] = []
        self._dirty: set[Key] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._waiters: list[tuple[Callable[[MetadataImage], bool], asyncio.Future[bool]]] = []
        # topics whose znode has no topic id yet (written by old tools): the controller adds one
        self.unidentified: dict[str, int] = {}
        self.unreadable: set[str] = set()  # topics whose znode cannot be decoded
        self.topics_unreadable = False  # /brokers/topics itself was missing at the last read
        self.full_reads = 0
        # Leaderships this process inherited from an earlier one of the same broker (killed
        # before ZooKeeper or the controller noticed): partition -> the state's version. The
        # image shows them without a leader (so nothing here serves as their leader) until a
        # state written after this process registered names the leader; the controller object
        # of this broker moves them (`ZkController`). See `own_view`.
        self.own_broker = own_broker
        self.registration_zxid: int | None = None  # czxid of our /brokers/ids node
        self.inherited: dict[tuple[str, int], int] = {}
        self._own_state_zxids: dict[tuple[str, int], int] = {}  # mzxid of states naming us
        zk.add_watch_listener(self._on_watch)
        zk.add_state_listener(self._on_state)

    # -- lifecycle ------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def incomplete(self) -> str | None:
        """Why the image may lack topics ZooKeeper holds (None: it has every one)."""
        why = []
        if self.topics_unreadable:
            why.append(f"{zn.TOPICS} could not be read")
        if self.unreadable:
            why.append(f"the topic znodes of {', '.join(sorted(self.unreadable))} cannot be read")
        if self.unidentified:
            why.append(f"{', '.join(sorted(self.unidentified))} have no topic id yet")
        return "; ".join(why) or None

    def note_registration(self, czxid: int) -> None:
        """This process registered (its /brokers/ids node has creation zxid ``czxid``): states
        written after that may make it a leader."""
        if self.registration_zxid is None:
            self.registration_zxid = czxid

    def own_view(self, name: str, state: PartitionState) -> PartitionState:
        """A partition state as read, as this broker takes it: a state naming this broker as
        leader that was written before this process registered was granted to an earlier
        process of the broker, whose log may have lost what it acknowledged, and whose
        followers may have moved on. Kafka's controller would see the bounce and elect anew;
        here it is applied without a leader (partition unavailable, not served by a stale
        leader) and noted in ``inherited``, for the controller object to elect again."""
        key = (name, state.partition)
        me = self.own_broker
        held = self.inherited.get(key)
        if held is not None and state.partition_epoch < held:  # a stale read changes nothing
            return dataclasses.replace(state, leader=NO_LEADER) if state.leader == me else state
        granted = self.registration_zxid is not None and \
            self._own_state_zxids.get(key, -1) > self.registration_zxid
        if me is None or state.leader != me or granted:
            self.inherited.pop(key, None)
            return state
        if held is None:
            log.debug("%s-%d: leader epoch %d was granted to an earlier process of broker %d: "
                      "not leading it until it is elected again", name, state.partition,
                      state.leader_epoch, me)
        self.inherited[key] = state.partition_epoch
        return dataclasses.replace(state, leader=NO_LEADER)

    async def start(self) -> None:
        """Read the whole tree into the image (raises if ZooKeeper fails), then follow it."""
        await self._full_read()
        self._tasks = [asyncio.create_task(self._run(), name="zk-mirror"),
                       asyncio.create_task(self._periodic(), name="zk-mirror-resync")]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks = []
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_result(False)

    def mark(self, key: Key) -> None:
        self._dirty.add(key)
        self._wake.set()

    def _on_watch(self, kind: str, path: str) -> None:
        key = key_for(path)
        if key is not None:
            self.mark(key)

    def _on_state(self, state: str) -> None:
        if state == "CONNECTED":  # a new session or a reconnection: watches may be gone
            self.mark(FULL)

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval_s)
            self.mark(FULL)

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._dirty = self._dirty, set()
            try:
                await self._process(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading ZooKeeper failed (%s: %s); re-reading everything soon",
                            type(exc).__name__, exc)
                self._dirty.add(FULL)
                await asyncio.sleep(1.0)
                self._wake.set()

    # -- applying ---------------------------------------------------------------------------

    def apply(self, records: list[dict[str, Any]]) -> list[Change]:
        """Apply records to the image and tell the subscribers (event loop thread only)."""
        if not records:
            return []
        if self.record_sink is not None:
            self.record_sink(records)
        changes = [c for c in (rec.apply(self.image, r) for r in records) if c is not None]
        if changes:
            for listener in list(self._listeners):
                try:
                    listener(changes)
                except Exception:
                    log.exception("metadata listener failed")
        self._check_waiters()
        return changes

    async def _apply_in_slices(self, records: list[dict[str, Any]]) -> None:
        """Partition states, each independent of the others, applied STATES_PER_SLICE at a time
        with the loop free in between: a failover or an election moving 1,000 partitions makes
        every subscriber reconcile each of them, tens of ms in one go (issue 28)."""
        for i in range(0, len(records), STATES_PER_SLICE):
            if i:
                await asyncio.sleep(0)
            self.apply(records[i:i + STATES_PER_SLICE])

    def _check_waiters(self) -> None:
        for predicate, fut in list(self._waiters):
            if fut.done():
                continue
            try:
                if predicate(self.image):
                    fut.set_result(True)
            except Exception as exc:
                fut.set_exception(exc)

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        """True once predicate(image) holds (checked after every change), False at timeout."""
        if predicate(self.image):
            return True
        if timeout_s <= 0:
            return False
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        entry = (predicate, fut)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False
        finally:
            self._waiters.remove(entry)

    # -- reading ----------------------------------------------------------------------------

    async def _process(self, batch: set[Key]) -> None:
        if FULL in batch:
            await self._full_read()
            return
        records: list[dict[str, Any]] = []
        if BROKERS in batch:
            records += self._broker_records(await self._read_brokers())
        if CONTROLLER in batch:
            records += self._controller_records(*await self._read_controller())
        if BROKER_CONFIGS in batch:
            records += self._broker_config_records(await self._read_broker_configs())
        if USER_CONFIGS in batch:
            records += self._entity_config_records(*await self._read_entity_configs())
        if GROUP_CONFIGS in batch:
            records += entity_config_records("group", self.image.group_configs,
                                             await self._read_group_configs())
        if ACLS in batch:
            records += self._acl_records(await self._read_acls())
        self.apply(records)
        topics: set[str] = {k[1] for k in batch if k[0] == "topic"}
        if TOPICS in batch:
            names = await self._topic_names()
            if names is not None:
                gone = [t for t in self.image.topics.values() if t.name not in names]
                self.apply([rec.remove_topic_record(t.topic_id) for t in gone])
                for name in list(self.unidentified):
                    if name not in names:
                        del self.unidentified[name]
                self.unreadable &= set(names)
                topics |= {n for n in names if n not in self.image.topics}
        if topics:
            snapshots = await asyncio.gather(*(self._read_topic(n) for n in sorted(topics)))
            records = []
            for name, snap in zip(sorted(topics), snapshots, strict=True):
                records += self._topic_records(name, snap)
            self.apply(records)
        states = sorted(k for k in batch if k[0] == "state" and k[1] not in topics)
        if states:
            reads = await asyncio.gather(*(self._read_state(k[1], k[2]) for k in states))
            records = []
            for (_, name, p), read in zip(states, reads, strict=True):
                records += self._state_records(name, p, read)
            await self._apply_in_slices(records)
        configs = sorted(k[1] for k in batch if k[0] == "topic_config" and k[1] not in topics)
        if configs:
            desired_configs = await asyncio.gather(*(self._read_config(zn.topic_config_path(n))
                                                     for n in configs))
            records = []
            for name, desired in zip(configs, desired_configs, strict=True):
                topic = self.image.topics.get(name)
                if topic is not None:
                    records += config_records("topic", name, topic.configs, desired)
            self.apply(records)

    async def _topic_names(self) -> list[str] | None:
        """The topics in ZooKeeper; None (and a WARN) when /brokers/topics is missing, which
        says nothing about the topics (a wrong chroot, a damaged tree), so nothing is removed."""
        names = await self.zk.children(zn.TOPICS, watch=True)
        self.topics_unreadable = names is None
        if names is None:
            log.warning("%s is missing in ZooKeeper: no topic is removed from the metadata "
                        "because of it", zn.TOPICS)
            await self.zk.exists(zn.TOPICS, watch=True)  # its creation is an event too
        return names

    async def _full_read(self) -> None:
        brokers = await self._read_brokers()
        controller = await self._read_controller()
        listed = await self._topic_names()
        names = listed or []
        snapshots = await asyncio.gather(*(self._read_topic(n) for n in names))
        broker_configs = await self._read_broker_configs()
        entity_configs = await self._read_entity_configs()
        group_configs = await self._read_group_configs()
        block_read = await self.zk.get(zn.PRODUCER_ID_BLOCK)
        records = self._broker_records(brokers) + self._controller_records(*controller)
        records += self._broker_config_records(broker_configs)
        records += self._entity_config_records(*entity_configs)
        records += entity_config_records("group", self.image.group_configs, group_configs)
        records += self._acl_records(await self._read_acls())
        present = set(names)
        if listed is not None:  # (a missing /brokers/topics removes nothing)
            records += [rec.remove_topic_record(t.topic_id) for t in self.image.topics.values()
                        if t.name not in present]
            self.unidentified = {n: v for n, v in self.unidentified.items() if n in present}
            self.unreadable &= present
        for name, snap in zip(names, snapshots, strict=True):
            records += self._topic_records(name, snap)
        block = zn.decode_producer_id_block(block_read[0]) if block_read else None
        if block is not None and block.end + 1 > self.image.next_producer_id:
            records.append(rec.producer_ids_record(block.end + 1))
        self.apply(records)
        self.full_reads += 1

    async def _read_brokers(self) -> dict[int, BrokerInfo]:
        ids = await self.zk.children(zn.BROKER_IDS, watch=True) or []
        ids = [i for i in ids if i.isdigit()]
        reads = await asyncio.gather(*(self.zk.get(zn.broker_path(int(i))) for i in ids))
        out: dict[int, BrokerInfo] = {}
        for i, got in zip(ids, reads, strict=True):
            if got is None:
                continue  # gone meanwhile; the children watch tells us
            try:
                out[int(i)] = zn.decode_broker(int(i), got[0], self.inter_broker)
            except (ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable registration of broker %s: %s", i, exc)
        return out

    async def _read_controller(self) -> tuple[int, int]:
        got = await self.zk.get_or_watch(zn.CONTROLLER)
        controller = -1
        if got is not None:
            try:
                controller = zn.decode_controller(got[0])
            except (ValueError, KeyError) as exc:
                log.warning("unreadable /controller: %s", exc)
        epoch_read = await self.zk.get(zn.CONTROLLER_EPOCH)
        epoch = zn.decode_controller_epoch(epoch_read[0]) if epoch_read else -1
        return controller, epoch

    async def _read_broker_configs(self) -> dict[str, dict[str, str]]:
        names = await self.zk.children(zn.CONFIG_BROKERS, watch=True) or []
        reads = await asyncio.gather(*(self._read_config(f"{zn.CONFIG_BROKERS}/{n}")
                                       for n in names))
        return {zn.broker_config_entity(n): cfg for n, cfg in zip(names, reads, strict=True)}

    async def _read_group_configs(self) -> dict[str, dict[str, str]]:
        names = await self.zk.children(zn.CONFIG_GROUPS, watch=True) or []
        reads = await asyncio.gather(*(self._read_config(f"{zn.CONFIG_GROUPS}/{n}")
                                       for n in names))
        return {zn.desanitize(n): cfg for n, cfg in zip(names, reads, strict=True) if cfg}

    async def _read_acls(self) -> list[AclBinding]:
        got = await self.zk.get_or_watch(zn.ACLS)
        if got is None:
            return []
        try:
            return [AclBinding.from_record(r) for r in zn.decode_acls(got[0])]
        except (ValueError, KeyError, TypeError) as exc:
            log.error("ignoring unreadable %s (no ACL changes applied): %s", zn.ACLS, exc)
            return list(self.image.acls)

    def _acl_records(self, desired: list[AclBinding]) -> list[dict[str, Any]]:
        wanted = dict.fromkeys(desired)
        out = [rec.remove_acl_record(a) for a in self.image.acls if a not in wanted]
        out += [rec.acl_record(a) for a in wanted if a not in self.image.acls]
        return out

    async def _read_entity_configs(self) -> tuple[dict[str, dict[str, str]], Quotas]:
        """Users' configs (all but quota keys: the SCRAM credentials) and the client quotas of
        users, users' client ids and client ids, all read with watches."""
        users = [zn.entity_name_of(n)
                 for n in await self.zk.children(zn.CONFIG_USERS, watch=True) or []]
        clients = [zn.entity_name_of(n)
                   for n in await self.zk.children(zn.CONFIG_CLIENTS, watch=True) or []]
        user_reads = await asyncio.gather(*(self._read_config(zn.user_config_path(u))
                                            for u in users))
        nested = await asyncio.gather(*(self._children_or_watch(zn.user_clients_path(u))
                                        for u in users))
        pairs = [(u, zn.entity_name_of(c)) for u, names in zip(users, nested, strict=True)
                 for c in names]
        pair_reads = await asyncio.gather(*(
            self._read_config(zn.quota_entity_path({quotas.USER: u, quotas.CLIENT_ID: c}))
            for u, c in pairs))
        client_reads = await asyncio.gather(*(self._read_config(zn.client_config_path(c))
                                              for c in clients))
        user_configs: dict[str, dict[str, str]] = {}
        found: Quotas = {}
        for user, config in zip(users, user_reads, strict=True):
            rest = {k: v for k, v in config.items() if k not in quotas.CLIENT_KEYS}
            if user is not None and rest:
                user_configs[user] = rest
            found[quotas.entity(user=user)] = zn.decode_quotas(config, quotas.CLIENT_KEYS)
        for (user, client), config in zip(pairs, pair_reads, strict=True):
            found[quotas.entity(user=user, client_id=client)] = zn.decode_quotas(
                config, quotas.CLIENT_KEYS)
        for client, config in zip(clients, client_reads, strict=True):
            found[quotas.entity(client_id=client)] = zn.decode_quotas(config, quotas.CLIENT_KEYS)
        return user_configs, {e: q for e, q in found.items() if q}

    async def _children_or_watch(self, path: str) -> list[str]:
        """Children of path with a watch; a missing znode gets an existence watch, so its
        creation (a user's first client id quota) is reported too."""
        while True:
            names = await self.zk.children(path, watch=True)
            if names is not None:
                return names
            if await self.zk.exists(path, watch=True) is None:
                return []

    async def _read_config(self, path: str) -> dict[str, str]:
        got = await self.zk.get_or_watch(path)
        if got is None:
            return {}
        try:
            return zn.decode_config(got[0])
        except ValueError as exc:
            log.warning("ignoring unreadable config %s: %s", path, exc)
            return {}

    async def _read_state(self, topic: str, partition: int) -> tuple[zn.LeaderAndIsr, int] | None:
        got = await self.zk.get_or_watch(zn.state_path(topic, partition))
        if got is None:
            return None
        try:
            state = zn.decode_state(got[0])
            if state.leader == self.own_broker:
                self._own_state_zxids[(topic, partition)] = got[1].mzxid
            else:
                self._own_state_zxids.pop((topic, partition), None)
            return state, got[1].version
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable state of %s-%d: %s", topic, partition, exc)
            return None

    async def _read_topic(self, name: str) -> TopicRead:
        """None when the topic is gone; UNREADABLE when its znode cannot be decoded or has no
        topic id (the image keeps the topic as it is)."""
        got = await self.zk.get(zn.topic_path(name), watch=True)
        if got is None:
            self.unidentified.pop(name, None)
            self.unreadable.discard(name)
            return None
        try:
            assignment = zn.decode_topic(got[0])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable topic znode %s (%s): the topic is kept as the metadata has "
                        "it until the znode can be read", name, exc)
            self.unreadable.add(name)
            return UNREADABLE
        self.unreadable.discard(name)
        if assignment.topic_id is None:  # (rewritten by an old tool?) not a deletion either
            self.unidentified[name] = got[1].version
            return UNREADABLE
        self.unidentified.pop(name, None)
        parts = sorted(assignment.partitions)
        reads = await asyncio.gather(*(self._read_state(name, p) for p in parts))
        configs = await self._read_config(zn.topic_config_path(name))
        return TopicSnapshot(
            name, assignment.topic_id,
            {p: self.own_view(name, state_from(p, assignment.partitions[p], r,
                                               assignment.adding_replicas.get(p),
                                               assignment.removing_replicas.get(p)))
             for p, r in zip(parts, reads, strict=True)},
            configs)

    # -- diffing ----------------------------------------------------------------------------

    def _broker_records(self, desired: dict[int, BrokerInfo]) -> list[dict[str, Any]]:
        current = self.image.brokers
        out = [rec.broker_record(info) for bid, info in sorted(desired.items())
               if current.get(bid) != info]
        out += [rec.remove_broker_record(bid) for bid in sorted(current) if bid not in desired]
        return out

    def _controller_records(self, controller: int, epoch: int) -> list[dict[str, Any]]:
        image = self.image
        if (image.controller_id, image.controller_epoch) == (controller, epoch):
            return []
        return [rec.controller_record(controller, epoch)]

    def _broker_config_records(self, desired: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
        return entity_config_records("broker", self.image.broker_configs, desired)

    def _entity_config_records(self, users: dict[str, dict[str, str]],
                               desired: Quotas) -> list[dict[str, Any]]:
        out = entity_config_records("user", self.image.user_configs, users)
        return out + quota_records(self.image.client_quotas, desired)

    def _topic_records(self, name: str, snap: TopicRead) -> list[dict[str, Any]]:
        if isinstance(snap, Unreadable):
            return []  # not gone: removing it from the image would delete its logs
        existing = self.image.topics.get(name)
        out: list[dict[str, Any]] = []
        if existing is not None and (snap is None or existing.topic_id != snap.topic_id):
            out.append(rec.remove_topic_record(existing.topic_id))
            existing = None
        if snap is None:
            return out
        if existing is None:
            out.append(rec.topic_record(name, snap.topic_id))
            out += config_records("topic", name, {}, snap.configs)
            out += [rec.partition_record(snap.topic_id, s) for _, s in sorted(snap.partitions.items())]
            return out
        out += config_records("topic", name, existing.configs, snap.configs)
        for p, desired in sorted(snap.partitions.items()):
            current = existing.partitions.get(p)
            if current is not None and desired.partition_epoch < current.partition_epoch:
                # a state read older than the image's: keep the newer state, but take the
                # assignment (replicas, reassignment) from this topic read
                desired = dataclasses.replace(
                    current, replicas=desired.replicas, adding_replicas=desired.adding_replicas,
                    removing_replicas=desired.removing_replicas)
            if partition_update_needed(current, desired):
                out.append(rec.partition_record(snap.topic_id, desired))
        return out

    def _state_records(self, name: str, partition: int,
                       read: tuple[zn.LeaderAndIsr, int] | None) -> list[dict[str, Any]]:
        topic = self.image.topics.get(name)
        current = topic.partitions.get(partition) if topic is not None else None
        if topic is None or current is None:
            self.mark(("topic", name))  # a partition we do not know yet: read the whole topic
            return []
        if read is None:
            return []  # deleted with its topic; the topic's own event removes it
        desired = self.own_view(name, state_from(partition, current.replicas, read,
                                                 current.adding_replicas,
                                                 current.removing_replicas))
        if not partition_update_needed(current, desired):
            return []
        return [rec.partition_record(topic.topic_id, desired)]
