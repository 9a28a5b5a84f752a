"""`strom storage migrate-from-zookeeper`: a stopped ZooKeeper-mode cluster's brokers become
KRaft nodes, keeping everything.

Strom's own (Kafka 4 removed its KIP-866 migration). Run on every node of the old cluster
once all its brokers are stopped, each with the node's new KRaft server.properties (same
``node.id`` as its ``broker.id``, same ``log.dirs``; combined or broker-only; a static quorum).
For each node it:

1. reads the whole ZooKeeper tree (as the brokers' mirror does) into a metadata image: topics
   with their ids, partition assignments, leaders, ISRs and epochs, topic/broker/user/group
   configs (SCRAM credentials are user configs), ACLs, client quotas, and the producer-id
   high water; it refuses while a broker is still registered, or when a topic cannot be read;
2. checks that every log dir is this broker's of this cluster (``meta.properties`` of the
   ZooKeeper mode: ``cluster.id`` and the broker's id, no ``directory.id`` yet);
3. writes, in the metadata dir, the snapshot ``00000000000000000001-0000000000.checkpoint``:
   the feature levels and the image's records, as the metadata log's state up to offset 1 in
   epoch 0 (every node gets the same one, so the quorum starts from it, and a broker added
   later fetches it from the leader: its log starts past it); on a controller also the
   bootstrap snapshot ``strom storage format`` writes;
4. rewrites ``meta.properties`` in the KRaft form (``version=1``, ``node.id``,
   ``directory.id``), keeping the cluster id.

Started, the nodes elect a quorum, replay the snapshot and load their partition directories
against it (nothing is stray); each broker registers, fenced, and the controller elects every
partition's leader again with the next leader epoch. Clients see the cluster stop and start:
this is an offline migration, not a rolling one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from strom.cli.common import CliError
from strom.cli.kraft_layout import (
    DEFAULT_MV_LEVEL,
    META_PROPERTIES,
    METADATA_VERSION,
    default_feature_levels,
    random_directory_id,
    read_meta,
)
from strom.cluster.features import feature_level_record
from strom.cluster.image import MetadataImage
from strom.cluster.records import image_records
from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.controller.loader import snapshot_values
from strom.raft.config import QuorumConfig
from strom.raft.snapshot import BOOTSTRAP_SNAPSHOT_ID, SnapshotId, write_snapshot
from strom.raft.storage import METADATA_DIR_NAME
from strom.storage.checkpoints import write_atomic

MIGRATED_SNAPSHOT_ID = SnapshotId(1, 0)
ZK_TIMEOUT_MS = 15_000


@dataclass
class ZooKeeperState:
    cluster_id: str
    image: MetadataImage


async def read_zookeeper(connect: str) -> ZooKeeperState:
    """The cluster id and the whole metadata image from a stopped cluster's ZooKeeper."""
    from strom.cluster.zk import znodes as zn
    from strom.cluster.zk.client import ZkClient
    from strom.cluster.zk.mirror import ZkMirror

    zk = ZkClient(connect, session_timeout_ms=ZK_TIMEOUT_MS, connection_timeout_ms=ZK_TIMEOUT_MS)
    try:
        await zk.start()
    except Exception as e:  # kazoo's timeouts and connection errors
        raise CliError(f"cannot reach ZooKeeper at {connect}: {type(e).__name__}: {e}") from None
    try:
        got = await zk.get(zn.CLUSTER_ID)
        if got is None:
            raise CliError(f"ZooKeeper at {connect} holds no Kafka cluster ({zn.CLUSTER_ID} is "
                           "missing): check the chroot")
        cluster_id = zn.decode_cluster_id(got[0])
        live = await zk.children(zn.BROKER_IDS) or []
        if live:
            raise CliError(f"broker(s) {', '.join(sorted(live, key=int))} of cluster "
                           f"{cluster_id} are still registered in ZooKeeper: stop every broker "
                           "of the cluster before migrating it")
        image = MetadataImage(cluster_id=cluster_id)
        mirror = ZkMirror(zk, image)
        await mirror.start()
        await mirror.stop()
        why = mirror.incomplete()
        if why:
            raise CliError(f"cannot migrate cluster {cluster_id}: {why}")
        return ZooKeeperState(cluster_id, image)
    finally:
        await zk.stop()


def migrate_node(config_path: Path, state: ZooKeeperState) -> list[str]:
    """Turn this node's ZooKeeper-mode log dirs into a KRaft node's (see the module doc)."""
    try:
        config = BrokerConfig.load(config_path)
        quorum = QuorumConfig.from_config(config.get)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if not quorum.process_roles:
        raise CliError("the KRaft server.properties needs process.roles (broker, or "
                       "broker,controller)")
    problems = quorum.problems()
    if problems:
        raise CliError(problems[0])
    if not quorum.voters:
        raise CliError("a migrated cluster starts on a static quorum: set "
                       "controller.quorum.voters")
    node_id = quorum.node_id
    metadata_dir = Path(config.get("metadata.log.dir") or config.log_dirs[0])
    dirs = list(dict.fromkeys([*config.log_dirs, metadata_dir]))
    for d in dirs:
        meta = d / META_PROPERTIES
        if not meta.exists():
            if d == metadata_dir and d not in config.log_dirs:
                continue  # a metadata dir of its own, new with KRaft
            raise CliError(f"no {META_PROPERTIES} in {d}: not a log dir of a broker of "
                           f"cluster {state.cluster_id}")
        props = read_meta(meta)
        if props.get("cluster.id") != state.cluster_id:
            raise CliError(f"{meta} belongs to cluster {props.get('cluster.id')}, not to "
                           f"{state.cluster_id} (the one ZooKeeper holds)")
        if "directory.id" in props:  # written by strom storage format (KRaft) only
            raise CliError(f"{meta} is already a KRaft node's")
        broker_id = props.get("broker.id", props.get("node.id"))
        if broker_id != str(node_id):
            raise CliError(f"{meta} is broker {broker_id}'s, but node.id is {node_id}")
    if (metadata_dir / METADATA_DIR_NAME).exists():
        raise CliError(f"{metadata_dir / METADATA_DIR_NAME} exists already: this node is "
                       "migrated, or keeps another metadata log")

    levels = default_feature_levels(DEFAULT_MV_LEVEL)
    features = {METADATA_VERSION: DEFAULT_MV_LEVEL,
                **{k: v for k, v in levels.items() if v != 0}}
    records = image_records(state.image)
    now = int(time.time() * 1000)
    log_dir = metadata_dir / METADATA_DIR_NAME
    log_dir.mkdir(parents=True)
    if quorum.is_controller:
        write_snapshot(log_dir, BOOTSTRAP_SNAPSHOT_ID,
                       [feature_level_record(name, level) for name, level in features.items()],
                       last_contained_log_timestamp=now, kraft_version=0, voters=None,
                       timestamp=now)
    write_snapshot(log_dir, MIGRATED_SNAPSHOT_ID, snapshot_values(features, records),
                   last_contained_log_timestamp=now, kraft_version=0, voters=None,
                   timestamp=now)
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / META_PROPERTIES,
                     f"#Migrated from ZooKeeper by strom storage migrate-from-zookeeper\n"
                     f"version=1\ncluster.id={state.cluster_id}\nnode.id={node_id}\n"
                     f"directory.id={random_directory_id()}\n", fsync=True, fsync_dir=True)
    image = state.image
    return [f"Migrated node {node_id} of cluster {state.cluster_id} to KRaft: "
            f"{len(image.topics)} topics, "
            f"{sum(len(t.partitions) for t in image.topics.values())} partitions, "
            f"{len(image.acls)} ACLs, {len(image.user_configs)} users, "
            f"{len(image.client_quotas)} quota entities, next producer id "
            f"{image.next_producer_id} ({len(records)} records in {log_dir})."]


def migrate(config_path: Path, connect: str) -> list[str]:
    if not config_path.is_file():
        raise CliError(f"config file not found: {config_path}")
    state = asyncio.run(read_zookeeper(connect))
    return migrate_node(config_path, state)
