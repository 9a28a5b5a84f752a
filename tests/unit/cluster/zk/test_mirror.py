"""The mirror's pure parts: which watch event concerns what, and how what ZooKeeper holds is
turned into metadata records against the image (without a ZooKeeper: a stub client)."""

import asyncio
import uuid

import pytest

from strom.cluster import records as rec
from strom.cluster.controller import check_isr_update
from strom.cluster.decisions import NO_LEADER, NO_STATE
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.mirror import (
    BROKER_CONFIGS,
    BROKERS,
    CONTROLLER,
    GROUP_CONFIGS,
    TOPICS,
    USER_CONFIGS,
    TopicSnapshot,
    ZkMirror,
    config_records,
    key_for,
    partition_update_needed,
    quota_records,
    state_from,
)
from strom.protocol.errors import ErrorCode, KafkaError


class StubZk:
    def add_watch_listener(self, listener) -> None:
        pass

    def add_state_listener(self, listener) -> None:
        pass


def mirror() -> ZkMirror:
    return ZkMirror(StubZk(), MetadataImage(cluster_id="c"))  # type: ignore[arg-type]


@pytest.mark.parametrize(("path", "key"), [
    ("/brokers/ids", BROKERS),
    ("/brokers/ids/3", BROKERS),
    ("/controller", CONTROLLER),
    ("/controller_epoch", CONTROLLER),
    ("/brokers/topics", TOPICS),
    ("/brokers/topics/orders", ("topic", "orders")),
    ("/brokers/topics/orders/partitions", ("topic", "orders")),
    ("/brokers/topics/orders/partitions/4/state", ("state", "orders", 4)),
    ("/brokers/topics/orders/partitions/x/state", None),
    ("/config/brokers", BROKER_CONFIGS),
    ("/config/brokers/<default>", BROKER_CONFIGS),
    ("/config/users", USER_CONFIGS),
    ("/config/users/alice/clients/app", USER_CONFIGS),
    ("/config/clients", USER_CONFIGS),
    ("/config/clients/<default>", USER_CONFIGS),
    ("/config/topics/orders", ("topic_config", "orders")),
    ("/config/groups", GROUP_CONFIGS),
    ("/config/groups/app%2Fone", GROUP_CONFIGS),
    ("/admin/delete_topics/orders", None),
    ("/latest_producer_id_block", None),
])
def test_watch_paths_map_to_what_is_re_read(path, key) -> None:
    assert key_for(path) == key


def test_state_from_znode_and_missing_znode() -> None:
    s = state_from(2, [1, 2], (zn.LeaderAndIsr(2, 5, (2, 1), 3), 11))
    assert s == PartitionState(2, [1, 2], [2, 1], 2, 5, 11)
    missing = state_from(2, [1, 2], None)
    assert (missing.leader, missing.isr, missing.leader_epoch, missing.partition_epoch) == (
        NO_LEADER, [], NO_STATE, NO_STATE)


def test_stale_partition_states_are_never_applied() -> None:
    cur = PartitionState(0, [1, 2], [1, 2], 1, 4, 10)
    assert not partition_update_needed(cur, PartitionState(0, [1, 2], [1], 1, 4, 9))
    assert not partition_update_needed(cur, PartitionState(0, [1, 2], [1, 2], 1, 4, 10))
    assert partition_update_needed(cur, PartitionState(0, [1, 2], [1], 1, 4, 11))
    assert partition_update_needed(cur, PartitionState(0, [1, 2, 3], [1, 2], 1, 4, 10))
    assert partition_update_needed(None, cur)


def test_config_records_set_and_remove() -> None:
    out = config_records("topic", "t", {"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"})
    assert out == [rec.config_record("topic", "t", "b", "3"),
                   rec.config_record("topic", "t", "c", "4")]
    assert config_records("broker", "", {"a": "1"}, {}) == [
        rec.config_record("broker", "", "a", None)]


def _snapshot(name: str, tid: uuid.UUID, states: dict[int, PartitionState],
              configs: dict[str, str] | None = None) -> TopicSnapshot:
    return TopicSnapshot(name, tid, states, configs or {})


def test_new_topic_then_changes_then_recreation() -> None:
    m = mirror()
    seen: list = []
    m.subscribe(seen.append)
    tid = uuid.uuid4()
    first = {0: state_from(0, [1, 2], (zn.LeaderAndIsr(1, 0, (1, 2), 1), 0)),
             1: state_from(1, [2, 1], None)}
    m.apply(m._topic_records("t", _snapshot("t", tid, first, {"retention.ms": "5"})))
    topic = m.image.topics["t"]
    assert topic.topic_id == tid and topic.configs == {"retention.ms": "5"}
    assert topic.partitions[1].leader == NO_LEADER
    assert [c.kind for c in seen[0]] == ["topic_created", "topic_configs", "partitions_created",
                                         "partitions_created"]
    # nothing changed: no records
    assert m._topic_records("t", _snapshot("t", tid, first, {"retention.ms": "5"})) == []
    # the controller gave partition 1 its state; a stale read of partition 0 is ignored
    second = {0: state_from(0, [1, 2], None),
              1: state_from(1, [2, 1], (zn.LeaderAndIsr(2, 0, (2, 1), 1), 0))}
    m.apply(m._topic_records("t", _snapshot("t", tid, second, {"retention.ms": "5"})))
    assert topic.partitions[1].leader == 2
    assert topic.partitions[0].leader == 1
    # deleted and created again under the same name: a new identity
    new_id = uuid.uuid4()
    m.apply(m._topic_records("t", _snapshot("t", new_id, second)))
    assert m.image.topics["t"].topic_id == new_id
    assert tid not in m.image.topics_by_id
    assert "topic_deleted" in [c.kind for c in seen[-1]]
    # gone from ZooKeeper
    m.apply(m._topic_records("t", None))
    assert "t" not in m.image.topics


def test_brokers_and_controller_records() -> None:
    m = mirror()
    seen: list = []
    m.subscribe(seen.append)
    b1, b2 = BrokerInfo(1, "h1", 9092), BrokerInfo(2, "h2", 9092, "r")
    m.apply(m._broker_records({1: b1, 2: b2}))
    assert m.image.brokers == {1: b1, 2: b2}
    assert {c.kind for c in seen[-1]} == {"brokers_changed"}
    assert m._broker_records({1: b1, 2: b2}) == []
    moved = BrokerInfo(2, "h2", 9999, "r")
    m.apply(m._broker_records({2: moved}))
    assert m.image.brokers == {2: moved}
    m.apply(m._controller_records(2, 5))
    assert (m.image.controller_id, m.image.controller_epoch) == (2, 5)
    assert m._controller_records(2, 5) == []


def test_broker_config_records_cover_removed_entities() -> None:
    m = mirror()
    m.apply(m._broker_config_records({"": {"a": "1"}, "2": {"b": "2"}}))
    assert m.image.broker_configs == {"": {"a": "1"}, "2": {"b": "2"}}
    m.apply(m._broker_config_records({"": {"a": "1"}}))
    assert "2" not in m.image.broker_configs  # no empty entry: a snapshot round trip is exact


def test_wait_until_wakes_on_apply_and_times_out() -> None:
    async def run() -> tuple[bool, bool]:
        m = mirror()
        waiter = asyncio.ensure_future(m.wait_until(lambda img: 3 in img.brokers, 5.0))
        await asyncio.sleep(0)
        m.apply([rec.broker_record(BrokerInfo(3, "h", 1))])
        ok = await waiter
        late = await m.wait_until(lambda img: 4 in img.brokers, 0.05)
        return ok, late

    assert asyncio.run(run()) == (True, False)


# -- ISR changes (AlterPartition's checks) ------------------------------------------------------


def test_isr_update_checks() -> None:
    s = PartitionState(0, [1, 2, 3], [1, 2], 1, 4, 10)
    check_isr_update(s, 4, 10, [1, 2, 3])
    with pytest.raises(KafkaError) as e:
        check_isr_update(s, 3, 10, [1])
    assert e.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KafkaError) as e:
        check_isr_update(s, 4, 9, [1])
    assert e.value.code == ErrorCode.INVALID_UPDATE_VERSION
    for bad in ([2, 3], [1, 4]):
        with pytest.raises(KafkaError) as e:
            check_isr_update(s, 4, 10, bad)
        assert e.value.code == ErrorCode.INVALID_REQUEST


class TreeZk(StubZk):
    """An in-memory tree of config znodes: path -> config."""

    def __init__(self, configs: dict[str, dict[str, str]]) -> None:
        self.data = {path: zn.encode_config(c) for path, c in configs.items()}

    def _paths(self) -> set[str]:
        out = set()
        for path in self.data:
            parts = path.strip("/").split("/")
            out |= {"/" + "/".join(parts[:i]) for i in range(1, len(parts) + 1)}
        return out

    async def children(self, path: str, *, watch: bool = False):
        if path not in self._paths():
            return None
        return sorted({p[len(path) + 1:].split("/")[0] for p in self._paths()
                       if p.startswith(path + "/")})

    async def exists(self, path: str, *, watch: bool = False):
        return True if path in self._paths() else None

    async def get_or_watch(self, path: str):
        return (self.data[path], None) if path in self.data else None


def test_users_and_clients_are_read_as_kafka_lays_them_out() -> None:
    zk = TreeZk({
        "/config/users/alice": {"SCRAM-SHA-256": "salt=x", "producer_byte_rate": "1024"},
        "/config/users/alice/clients/my%20app": {"consumer_byte_rate": "2048"},
        "/config/users/alice/clients/<default>": {"request_percentage": "12.5"},
        "/config/users/<default>": {"producer_byte_rate": "100"},
        "/config/users/bob": {"SCRAM-SHA-512": "salt=y"},
        "/config/clients/<default>": {"controller_mutation_rate": "5"},
        "/config/clients/a%2Fb": {"producer_byte_rate": "7", "unknown": "1"},
    })
    m = ZkMirror(zk, MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    users, quotas = asyncio.run(m._read_entity_configs())
    assert users == {"alice": {"SCRAM-SHA-256": "salt=x"}, "bob": {"SCRAM-SHA-512": "salt=y"}}
    assert quotas == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", "my app"), ("user", "alice")): {"consumer_byte_rate": 2048.0},
        (("client-id", None), ("user", "alice")): {"request_percentage": 12.5},
        (("user", None),): {"producer_byte_rate": 100.0},
        (("client-id", None),): {"controller_mutation_rate": 5.0},
        (("client-id", "a/b"),): {"producer_byte_rate": 7.0},
    }
    m.apply(m._entity_config_records(users, quotas))
    assert m.image.client_quotas == quotas and m.image.user_configs == users
    assert m._entity_config_records(users, quotas) == []  # nothing left to change


def test_quota_records_set_change_and_remove() -> None:
    a, b = (("user", "a"),), (("client-id", "b"),)
    current = {a: {"producer_byte_rate": 1.0, "consumer_byte_rate": 2.0}, b: {"x": 1.0}}
    desired = {a: {"producer_byte_rate": 3.0, "consumer_byte_rate": 2.0}}
    image = MetadataImage(cluster_id="c")
    for e, q in current.items():
        for k, v in q.items():
            rec.apply(image, rec.client_quota_record(e, k, v))
    for r in quota_records(current, desired):
        rec.apply(image, r)
    assert image.client_quotas == desired
