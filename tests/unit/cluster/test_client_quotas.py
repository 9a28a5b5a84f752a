"""Client quotas in the metadata: the record, the image, snapshots, the single node's log."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.cluster import records as rec
from strom.cluster.controller import LocalController
from strom.cluster.image import BrokerInfo, MetadataImage
from strom.cluster.metadata_log import MetadataLog
from strom.cluster.quotas import entity, quota_entity_of
from strom.storage.manager import LogManager

ALICE_APP = entity(user="alice", client_id="app")
DEFAULT_USER = entity(user=None)
ALICE_DEFAULT_CLIENT = entity(user="alice", client_id=None)


def test_entities_are_canonical() -> None:
    assert ALICE_APP == (("client-id", "app"), ("user", "alice"))
    assert quota_entity_of([["user", "alice"], ["client-id", "app"]]) == ALICE_APP
    assert quota_entity_of([("user", None)]) == DEFAULT_USER


def test_records_set_change_and_remove() -> None:
    image = MetadataImage(cluster_id="c")
    change = rec.apply(image, rec.client_quota_record(ALICE_APP, "producer_byte_rate", 1024))
    assert change is not None and change.kind == "client_quotas"
    rec.apply(image, rec.client_quota_record(ALICE_APP, "request_percentage", 12.5))
    rec.apply(image, rec.client_quota_record(ALICE_APP, "producer_byte_rate", 2048))
    assert image.client_quotas == {ALICE_APP: {"producer_byte_rate": 2048.0,
                                               "request_percentage": 12.5}}
    rec.apply(image, rec.client_quota_record(ALICE_APP, "producer_byte_rate", None))
    rec.apply(image, rec.client_quota_record(ALICE_APP, "request_percentage", None))
    assert image.client_quotas == {}  # an entity without quotas is gone


def test_snapshot_round_trip_keeps_defaults_apart() -> None:
    image = MetadataImage(cluster_id="c")
    for ent, value in ((ALICE_APP, 1.0), (DEFAULT_USER, 2.0), (ALICE_DEFAULT_CLIENT, 3.0),
                       (entity(client_id=None), 4.0)):
        rec.apply(image, rec.client_quota_record(ent, "consumer_byte_rate", value))
    capture = image.capture()
    rec.apply(image, rec.client_quota_record(DEFAULT_USER, "consumer_byte_rate", 9.0))
    again = MetadataImage.from_snapshot(capture.to_snapshot())
    assert again.client_quotas[DEFAULT_USER] == {"consumer_byte_rate": 2.0}  # as captured
    assert again.client_quotas[ALICE_DEFAULT_CLIENT] == {"consumer_byte_rate": 3.0}
    assert len(again.client_quotas) == 4
    assert MetadataImage.from_snapshot({"cluster_id": "c", "topics": []}).client_quotas == {}


def test_the_local_controller_persists_through_log_and_snapshot(tmp_path: Path) -> None:
    logs = LogManager([tmp_path])
    logs.load()
    metadata_log = MetadataLog(logs)
    image = metadata_log.load("c")
    controller = LocalController(metadata_log, image, BrokerInfo(0, "localhost", 9092, None))
    asyncio.run(controller.alter_client_quotas({ALICE_APP: {"producer_byte_rate": 1024.0},
                                                DEFAULT_USER: {"request_percentage": 50.0}}))
    assert MetadataLog(logs).load("c").client_quotas == image.client_quotas  # replayed
    metadata_log.snapshot(image)
    asyncio.run(controller.alter_client_quotas({DEFAULT_USER: {"request_percentage": None}}))
    replayed = MetadataLog(logs).load("c")  # the snapshot, then the removal after it
    assert replayed.client_quotas == {ALICE_APP: {"producer_byte_rate": 1024.0}}
