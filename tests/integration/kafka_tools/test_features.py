"""kafka-features against a KRaft Strom node: the finalized levels its metadata log holds,
changed by UpdateFeatures (upgrade, downgrade, dry runs) and refused with Kafka's words where
Kafka's controller refuses (a feature Strom lacks, a downgrade asked as an upgrade, a
metadata.version downgrade, kraft.version going down); kraft.version goes from 0 to 1 once
(a static quorum becomes dynamic) and stays so across a restart."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..broker import BrokerProcess
from ..conftest import DEFAULT_OVERRIDES
from .tools import KafkaTools

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def kraft_node(tmp_path: Path) -> Iterator[BrokerProcess]:
    node = BrokerProcess(tmp_path / "node", name="features", kraft=True)
    try:
        node.start(dict(DEFAULT_OVERRIDES))
        yield node
    finally:
        node.stop()


def levels(text: str) -> dict[str, str]:
    """`Feature: NAME ... FinalizedVersionLevel: LEVEL` lines of kafka-features describe."""
    return dict(re.findall(r"^Feature: (\S+).*?FinalizedVersionLevel: (\S+)", text, re.M))


def test_levels_change_through_update_features(kafka_tools: KafkaTools,
                                               kraft_node: BrokerProcess) -> None:
    def features(*args: str, code: int = 0) -> str:
        result = kafka_tools.run("kafka-features", "--bootstrap-server", kraft_node.bootstrap,
                                 *args, code=code)
        return result.stdout + result.stderr

    before = levels(features("describe"))
    assert before["share.version"] == "2" and before["metadata.version"] == "4.4-IV2", before
    assert "share.version was downgraded to 1." in features(
        "downgrade", "--feature", "share.version=1")
    assert levels(features("describe"))["share.version"] == "1"
    assert "share.version can be upgraded to 2." in features(
        "upgrade", "--feature", "share.version=2", "--dry-run")
    assert levels(features("describe"))["share.version"] == "1"  # a dry run changes nothing
    assert "share.version was upgraded to 2." in features(
        "upgrade", "--feature", "share.version=2")
    assert levels(features("describe")) == before

    refused = features("upgrade", "--feature", "share.version=1", code=1)
    assert "Can't downgrade the version of this feature without setting the upgrade type" \
        in refused
    assert "does not support the given feature" in features(
        "upgrade", "--feature", "nosuch.version=1", code=1)
    assert "Strom supports no metadata.version downgrade" in features(
        "downgrade", "--metadata", "3.9-IV0", code=1)
    assert levels(features("describe")) == before


def test_kraft_version_goes_up_once_and_levels_survive_a_restart(
        kafka_tools: KafkaTools, kraft_node: BrokerProcess) -> None:
    def features(*args: str, code: int = 0) -> str:
        result = kafka_tools.run("kafka-features", "--bootstrap-server", kraft_node.bootstrap,
                                 *args, code=code)
        return result.stdout + result.stderr

    assert levels(features("describe"))["kraft.version"] == "0"  # controller.quorum.voters
    features("downgrade", "--feature", "streams.version=0")
    # the static quorum becomes dynamic: its voter, with its directory id, is in the log now
    assert "kraft.version was upgraded to 1." in features(
        "upgrade", "--feature", "kraft.version=1")
    assert "never down" in features("downgrade", "--feature", "kraft.version=0", code=1)
    kraft_node.stop()
    kraft_node.start(dict(DEFAULT_OVERRIDES))
    shown = levels(features("describe"))
    assert "streams.version" not in shown or shown["streams.version"] == "0", shown
    assert shown["share.version"] == "2" and shown["kraft.version"] == "1", shown
