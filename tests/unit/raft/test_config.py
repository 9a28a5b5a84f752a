"""KRaft configs: Kafka 4.4's names, types and defaults in the registry, the voter and
bootstrap-server parsers, and the quorum settings built from them."""

from __future__ import annotations

import logging
import uuid

import pytest

from strom.config.broker import BROKER_CONFIGS, BrokerConfig
from strom.config.checks import check_startup
from strom.config.defs import ConfigError, ConfigType
from strom.raft.config import (
    HostPort,
    QuorumConfig,
    VoterAddress,
    parse_bootstrap_servers,
    parse_initial_controllers,
    parse_voters,
)

T = ConfigType

# Kafka 4.4.0's defaults (its KafkaConfig values dump) and ConfigDef types.
KAFKA = {
    "process.roles": (T.LIST, None),
    "node.id": (T.INT, None),
    "controller.listener.names": (T.LIST, None),
    "controller.quorum.voters": (T.LIST, []),
    "controller.quorum.bootstrap.servers": (T.LIST, []),
    "controller.quorum.election.timeout.ms": (T.INT, 1000),
    "controller.quorum.fetch.timeout.ms": (T.INT, 2000),
    "controller.quorum.election.backoff.max.ms": (T.INT, 1000),
    "controller.quorum.append.linger.ms": (T.INT, 25),
    "controller.quorum.request.timeout.ms": (T.INT, 2000),
    "controller.quorum.retry.backoff.ms": (T.INT, 20),
    "controller.quorum.auto.join.enable": (T.BOOLEAN, False),
    "controller.quorum.fetch.max.bytes": (T.INT, 1048576),
    "controller.quorum.fetch.snapshot.max.bytes": (T.INT, 1048576),
    "controller.socket.timeout.ms": (T.INT, 30000),
    "broker.heartbeat.interval.ms": (T.INT, 2000),
    "broker.session.timeout.ms": (T.INT, 9000),
    "initial.broker.registration.timeout.ms": (T.INT, 60000),
    "metadata.log.dir": (T.STRING, None),
    "metadata.log.max.record.bytes.between.snapshots": (T.LONG, 20971520),
    "metadata.log.max.snapshot.interval.ms": (T.LONG, 3600000),
    "metadata.log.segment.bytes": (T.INT, 1073741824),
    "metadata.log.segment.ms": (T.LONG, 604800000),
    "metadata.max.retention.bytes": (T.LONG, 104857600),
    "metadata.max.retention.ms": (T.LONG, 604800000),
    "metadata.max.idle.interval.ms": (T.INT, 500),
    "sasl.mechanism.controller.protocol": (T.STRING, "GSSAPI"),
    "early.start.listeners": (T.STRING, None),
}


# What a KRaft node acts on (static and dynamic quorums; snapshots; broker sessions); the rest
# is warned by name.
IMPLEMENTED = {
    "metadata.log.max.record.bytes.between.snapshots", "metadata.log.max.snapshot.interval.ms",
    "process.roles", "node.id", "controller.listener.names", "controller.quorum.voters",
    "controller.quorum.bootstrap.servers", "controller.quorum.auto.join.enable",
    "metadata.max.retention.bytes", "metadata.max.retention.ms",
    "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
    "controller.quorum.election.backoff.max.ms", "controller.quorum.append.linger.ms",
    "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms",
    "controller.quorum.fetch.max.bytes", "controller.quorum.fetch.snapshot.max.bytes",
    "metadata.log.dir", "metadata.log.segment.bytes",
    "metadata.log.segment.ms", "broker.heartbeat.interval.ms", "broker.session.timeout.ms",
    "sasl.mechanism.controller.protocol", "metadata.max.idle.interval.ms",
    "initial.broker.registration.timeout.ms",
}


def test_kafkas_names_types_and_defaults() -> None:
    for name, (type_, default) in KAFKA.items():
        d = BROKER_CONFIGS[name]
        assert (d.type, d.default) == (type_, default), name
        assert d.read_only and d.implemented == (name in IMPLEMENTED), name


def test_a_kafka_4_server_properties_loads_and_is_warned_about(caplog) -> None:
    cfg = BrokerConfig.load(overrides={
        "process.roles": "broker,controller", "node.id": "1",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": "1@localhost:9093,2@[::1]:9094",
        "controller.quorum.election.timeout.ms": "1500",
        "controller.socket.timeout.ms": "20000"})
    assert cfg.get("process.roles") == ["broker", "controller"]
    assert cfg.get("controller.quorum.voters") == ["1@localhost:9093", "2@[::1]:9094"]
    with caplog.at_level(logging.WARNING, logger="strom.config.checks"):
        check_startup(cfg)
    assert "config controller.socket.timeout.ms is accepted but not implemented" \
        in caplog.text
    q = QuorumConfig.from_config(cfg.get)
    assert q.voters == (VoterAddress(1, "localhost", 9093), VoterAddress(2, "::1", 9094))
    assert (q.election_timeout_ms, q.fetch_timeout_ms, q.node_id) == (1500, 2000, 1)
    assert q.is_broker and q.is_controller and q.static_voters and q.problems() == []


@pytest.mark.parametrize(("name", "value", "why"), [
    ("process.roles", "", "must not be empty"),
    ("process.roles", "broker,zookeeper", "String must be one of: broker, controller"),
    ("process.roles", "broker,broker", "appears twice"),
    ("node.id", "-1", "must be at least 0"),
    ("node.id", "x", "Not a number"),
    ("controller.listener.names", "A,A", "appears twice"),
    ("controller.quorum.voters", "1@localhost", "{id}@{host}:{port}"),
    ("controller.quorum.bootstrap.servers", "localhost", "{host}:{port}"),
    ("metadata.log.segment.bytes", "1024", "at least 8388608"),
    ("controller.quorum.auto.join.enable", "yes", "true or false"),
])
def test_bad_values_are_refused_in_one_line(name: str, value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")) as e:
        BrokerConfig.load(overrides={name: value})
    assert why in str(e.value) and "\n" not in str(e.value)


def test_voters() -> None:
    assert parse_voters("1@localhost:9093, 2@host-2.example:19093,3@10.0.0.3:9093") == [
        VoterAddress(1, "localhost", 9093), VoterAddress(2, "host-2.example", 19093),
        VoterAddress(3, "10.0.0.3", 9093)]
    assert parse_voters(["4@[2001:db8::1]:9093"]) == [VoterAddress(4, "2001:db8::1", 9093)]
    assert parse_voters("") == [] and parse_voters([]) == []
    assert parse_voters("1@0.0.0.0:9093") == [VoterAddress(1, "0.0.0.0", 9093)]


@pytest.mark.parametrize(("value", "why"), [
    ("localhost:9093", "in the form {id}@{host}:{port}"),
    ("1@2@localhost:9093", "in the form"),
    ("x@localhost:9093", "node id 'x'"),
    ("-1@localhost:9093", "node id '-1'"),
    ("1@localhost", "cannot parse a host name"),
    ("1@:9093", "cannot parse a host name"),
    ("1@local host:9093", "cannot parse a host name"),
    ("1@localhost:0", "port '0'"),
    ("1@localhost:65536", "port '65536'"),
    ("1@localhost:http", "port 'http'"),
    ("1@a:1,1@b:2", "node id 1 appears more than once"),
])
def test_bad_voters(value: str, why: str) -> None:
    with pytest.raises(ConfigError, match=r"controller\.quorum\.voters") as e:
        parse_voters(value)
    assert why in str(e.value) and "\n" not in str(e.value)


def test_routable_voters() -> None:
    with pytest.raises(ConfigError, match=r"0\.0\.0\.0 is not routable"):
        parse_voters("1@0.0.0.0:9093", require_routable=True)


def test_initial_controllers() -> None:
    dir1 = "AAAAAAAAAAAAAAAAAAAABQ"
    assert parse_initial_controllers(f"1@localhost:9093:{dir1},2@[::1]:9094:{dir1[:-1]}g") == [
        VoterAddress(1, "localhost", 9093, uuid.UUID(int=5)),
        VoterAddress(2, "::1", 9094, uuid.UUID(int=6))]
    for bad, why in [("1@localhost:9093", "no directory id after the port"),
                     ("1@localhost:9093:AAAAAAAAAAAAAAAAAAAAAA", "non-zero"),
                     ("1@localhost:9093:xyz", "directory id 'xyz'"),
                     (f"1@localhost:{dir1}", "no directory id after the port"),
                     (f"localhost:9093:{dir1}", "in the form"),
                     (f"1@a:1:{dir1},1@b:2:{dir1}", "appears more than once"),
                     ("", "at least one entry")]:
        with pytest.raises(ConfigError, match="--initial-controllers") as e:
            parse_initial_controllers(bad)
        assert why in str(e.value), bad


def test_bootstrap_servers() -> None:
    assert parse_bootstrap_servers("localhost:9093,[::1]:9094") == [
        HostPort("localhost", 9093), HostPort("::1", 9094)]
    with pytest.raises(ConfigError, match=r"1@localhost:9093 for configuration controller\.quorum\.bootstrap\.servers"):
        parse_bootstrap_servers("1@localhost:9093")


def test_quorum_problems() -> None:
    def quorum(**overrides: str) -> QuorumConfig:
        return QuorumConfig.from_config(BrokerConfig.load(overrides=overrides).get)

    assert quorum().problems() == []  # not a KRaft node
    assert quorum(**{"process.roles": "controller"}).problems() == [
        "node.id is required when process.roles is set",
        "controller.listener.names is required when process.roles is set",
        "controller.quorum.voters or controller.quorum.bootstrap.servers is required when "
        "process.roles is set"]
    base = {"controller.listener.names": "CONTROLLER", "node.id": "4"}
    assert quorum(**base, **{"process.roles": "controller",
                             "controller.quorum.voters": "1@a:1,2@b:2"}).problems() == [
        "node.id 4 of a controller must be one of the voters in controller.quorum.voters"]
    assert quorum(**base, **{"process.roles": "broker",
                             "controller.quorum.voters": "1@a:1"}).problems() == []
    assert quorum(**base, **{"process.roles": "broker",
                             "controller.quorum.bootstrap.servers": "a:1",
                             "controller.quorum.auto.join.enable": "true"}).problems() == [
        "controller.quorum.auto.join.enable=true is only for nodes with the controller role"]
    dynamic = quorum(**base, **{"process.roles": "controller",
                                "controller.quorum.bootstrap.servers": "a:1"})
    assert dynamic.problems() == [] and not dynamic.static_voters
    assert dynamic.bootstrap_servers == (HostPort("a", 1),)


CONTROLLER = {"process.roles": "controller", "node.id": "1",
              "controller.listener.names": "CONTROLLER",
              "controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:9094",
              "listeners": "CONTROLLER://127.0.0.1:9093"}


def _check(settings: dict[str, str]) -> None:
    check_startup(BrokerConfig.load(overrides=settings))


def test_a_controller_only_node_passes_the_checks_without_a_protocol_map() -> None:
    _check(CONTROLLER)  # Kafka maps controller listeners to PLAINTEXT when the map is default


def test_a_controller_of_a_dynamic_quorum_passes_the_checks() -> None:
    dynamic = {k: v for k, v in CONTROLLER.items() if k != "controller.quorum.voters"}
    _check({**dynamic, "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
            "controller.quorum.auto.join.enable": "true"})


@pytest.mark.parametrize(("changes", "why"), [
    ({"controller.quorum.voters": "2@127.0.0.1:9094"},
     "node.id 1 of a controller must be one of the voters"),
    ({"node.id": None}, "node.id is required"),
    ({"controller.listener.names": "RAFT",
      "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,RAFT:PLAINTEXT"},
     "controller.listener.names must only name listeners of the 'listeners' config"),
    ({"listeners": "CONTROLLER://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092"},
     "must all be controller listeners from controller.listener.names; PLAINTEXT is not"),
    ({"zookeeper.connect": "localhost:2181"}, "zookeeper.connect cannot be set"),
    ({"listener.security.protocol.map": "CONTROLLER:SSL"}, "PLAINTEXT only"),
    # a map set explicitly must name the controller listener (Kafka maps it only by default)
    ({"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"},
     "No security protocol defined for listener CONTROLLER"),
])
def test_a_misconfigured_controller_is_refused_in_one_line(changes: dict[str, str | None],
                                                           why: str) -> None:
    settings = {**CONTROLLER, **changes}
    with pytest.raises(ConfigError) as e:
        _check({k: v for k, v in settings.items() if v is not None})
    assert str(e.value).startswith("refusing to start: ") and "\n" not in str(e.value)
    assert why in str(e.value)
