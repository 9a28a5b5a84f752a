"""Unreadable is not gone: a topic znode that cannot be decoded, or a missing /brokers/topics,
never removes a topic from the image (that would delete its logs), and the mirror says its image
is incomplete so the broker judges no directory stray."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from tests.unit.cluster.zk.test_mirror import TreeZk

from strom.cluster.image import MetadataImage
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.mirror import ZkMirror


class RawTreeZk(TreeZk):
    """`TreeZk` holding raw znode bytes (what the mirror reads at a full read), any of them
    undecodable."""

    def __init__(self, data: dict[str, bytes]) -> None:  # raw bytes, not configs to encode
        self.data = data

    async def get(self, path: str, *, watch: bool = False):
        return (self.data[path], SimpleNamespace(version=0)) if path in self.data else None

    async def get_or_watch(self, path: str):
        return await self.get(path)


def topic_znode(topic_id: uuid.UUID) -> bytes:
    return zn.encode_topic(zn.TopicAssignment(topic_id, {0: [1, 2]}))


def tree(**topics: bytes) -> dict[str, bytes]:
    data = {"/brokers/topics": b""}
    for name, raw in topics.items():
        data[zn.topic_path(name)] = raw
    return data


def full_read(m: ZkMirror) -> list[str]:
    """The kinds of the changes one full read makes."""
    seen: list[str] = []
    m.subscribe(lambda changes: seen.extend(c.kind for c in changes))
    asyncio.run(m._full_read())
    m._listeners.clear()
    return seen


def test_an_unreadable_topic_znode_keeps_the_topic_and_marks_the_image_incomplete() -> None:
    good, bad = uuid.uuid4(), uuid.uuid4()
    zk = RawTreeZk(tree(good=topic_znode(good), bad=topic_znode(bad)))
    m = ZkMirror(zk, MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    full_read(m)
    assert set(m.image.topics) == {"good", "bad"} and m.incomplete() is None

    zk.data[zn.topic_path("bad")] = b"\x00{not json"
    kinds = full_read(m)
    assert "topic_deleted" not in kinds
    assert m.image.topics["bad"].topic_id == bad  # kept as it was
    assert "bad" in (m.incomplete() or "")

    zk.data[zn.topic_path("bad")] = topic_znode(bad)  # readable again
    full_read(m)
    assert m.incomplete() is None


def test_a_topic_never_read_is_missing_and_the_image_says_so() -> None:
    zk = RawTreeZk(tree(good=topic_znode(uuid.uuid4()), bad=b"garbage"))
    m = ZkMirror(zk, MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    full_read(m)
    assert set(m.image.topics) == {"good"}
    assert "cannot be read" in (m.incomplete() or "") and "bad" in (m.incomplete() or "")


def test_a_missing_topics_znode_removes_nothing() -> None:
    zk = RawTreeZk(tree(good=topic_znode(uuid.uuid4())))
    m = ZkMirror(zk, MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    full_read(m)
    zk.data = {k: v for k, v in zk.data.items() if not k.startswith("/brokers/topics")}
    kinds = full_read(m)
    assert "topic_deleted" not in kinds and set(m.image.topics) == {"good"}
    assert zn.TOPICS in (m.incomplete() or "")
    # the same through the watch path
    asyncio.run(m._process({("topics",)}))
    assert set(m.image.topics) == {"good"}


def test_a_deleted_topic_znode_still_removes_the_topic() -> None:
    zk = RawTreeZk(tree(good=topic_znode(uuid.uuid4()), gone=topic_znode(uuid.uuid4())))
    m = ZkMirror(zk, MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    full_read(m)
    del zk.data[zn.topic_path("gone")]
    assert "topic_deleted" in full_read(m)
    assert set(m.image.topics) == {"good"} and m.incomplete() is None


def test_a_topic_znode_that_lost_its_id_keeps_the_topic() -> None:
    topic_id = uuid.uuid4()
    zk = RawTreeZk(tree(t=topic_znode(topic_id)))
    m = ZkMirror(zk, MetadataImage(cluster_id="c"))  # type: ignore[arg-type]
    full_read(m)
    zk.data[zn.topic_path("t")] = zn.encode_topic(zn.TopicAssignment(None, {0: [1, 2]}))
    assert "topic_deleted" not in full_read(m)
    assert m.image.topics["t"].topic_id == topic_id and "no topic id" in (m.incomplete() or "")
