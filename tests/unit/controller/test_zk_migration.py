"""The end of a move from ZooKeeper (strom.controller.zk_migration): a controller without
the migration finalizes it only once no broker known only from ZooKeeper is live, and until
then changes nothing but registrations; the migrating controller's mirror keeps ZooKeeper's
/controller and the registrations of fenced KRaft brokers out of the metadata log.

The fake quorum of test_quorum_controller commits every append at once."""

from __future__ import annotations

import pytest

from strom.cluster import records as rec
from strom.cluster.image import BrokerInfo
from strom.controller.zk_migration import MigratingController, MigrationSettings
from strom.protocol.errors import ErrorCode, KafkaError

from .test_cluster_controller import Setup, info, run


def test_finalizing_waits_for_every_broker_to_run_in_kraft_mode() -> None:
    async def main() -> None:
        s = Setup()
        await s.live_broker(1)
        rec.apply(s.image, rec.zk_migration_record(rec.ZK_MIGRATING))
        rec.apply(s.image, rec.broker_record(info(2)))  # still in ZooKeeper mode
        assert not await s.controller._finalize_zk_migration()
        assert s.image.zk_migration == rec.ZK_MIGRATING
        with pytest.raises(KafkaError) as refused:  # no change while broker 2 follows ZooKeeper
            await s.controller.create_topic("t", 1, 1, None, {})
        assert refused.value.code == ErrorCode.NOT_CONTROLLER
        await s.live_broker(2)  # restarted in KRaft mode: registrations still go through
        assert await s.controller._finalize_zk_migration()
        assert s.image.zk_migration == rec.ZK_FINALIZED
        await s.controller.create_topic("t", 1, 2, None, {})

    run(main)


def _migrating(s: Setup) -> MigratingController:
    settings = MigrationSettings("127.0.0.1:1/none", 4000, "PLAINTEXT", {}, None, 10)
    return MigratingController(s.loader, s.quorum.append, migration=settings, cluster_id="c",
                               node_id=1, is_leader=lambda: True, session_timeout_ms=60_000,
                               unclean_for=lambda _t: False)


def test_the_mirror_leaves_the_zookeeper_controller_and_fenced_kraft_brokers_out() -> None:
    async def main() -> None:
        s = Setup()
        await s.live_broker(2)
        await s.controller._set_state(s.image.registrations[2], fenced=True)
        c = _migrating(s)
        c._collect([rec.controller_record(4, 9), rec.broker_record(info(2)),
                    rec.broker_record(BrokerInfo(5, "127.0.0.1", 9095))])
        assert [(r["type"], r["broker_id"]) for r in c._pending] == [("broker", 5)]

    run(main)


def test_a_controller_not_linked_to_zookeeper_answers_not_controller() -> None:
    async def main() -> None:
        s = Setup()
        c = _migrating(s)
        for call in (c.register_broker(info(2), "a"), c.create_topic("t", 1, 1, None, {}),
                     c.allocate_producer_ids(2)):
            with pytest.raises(KafkaError) as refused:
                await call
            assert refused.value.code == ErrorCode.NOT_CONTROLLER

    run(main)

