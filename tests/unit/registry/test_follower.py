"""A broker's copy of the registry, fed by fetching `_schemas-0` from its leader."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from strom.coordinator.runtime.store import StateStore
from strom.record import Record, build_batch
from strom.registry import errors as err
from strom.registry.coordinator import RegistryCoordinator
from strom.registry.follower import Fetched, RegistryFollower
from strom.registry.state import SchemaVersion, encode, schema_key, schema_value


def schema_record(sid: int, subject: str = "s") -> tuple[bytes, bytes]:
    v = SchemaVersion(subject, sid, sid, f"guid-{sid}", "AVRO", '"string"')
    key, value = encode(schema_key(v.subject, v.version)), encode(schema_value(v))
    assert key is not None and value is not None
    return key, value


class Leader:
    """`_schemas-0` as its leader answers a consumer's fetch: from an offset up to its high
    watermark, a fetch with nothing new waiting until something is committed."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []  # (base offset, records, batch)
        self.end = 0
        self.elsewhere = True
        self.log_start = 0
        self.fetches = 0
        self._new = asyncio.Event()

    def commit(self, *records: tuple[bytes, bytes]) -> None:
        batch = build_batch((Record(self.end + i, 0, k, v) for i, (k, v) in enumerate(records)),
                            base_offset=self.end)
        self.batches.append((self.end, len(records), batch))
        self.end += len(records)
        self._new.set()

    def leader_elsewhere(self) -> bool:
        return self.elsewhere

    async def fetch(self, offset: int) -> Fetched | None:
        self.fetches += 1
        if offset < self.log_start:
            return Fetched(None, self.end, self.log_start, out_of_range=True)
        if offset >= self.end:
            self._new.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), 0.05)
        data = b"".join(b for base, n, b in self.batches if base + n > offset)
        return Fetched(data, self.end, self.log_start)

    async def close(self) -> None:
        pass


async def until(check: object, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_the_copy_follows_committed_records_and_is_served_once_caught_up() -> None:
    async def run() -> None:
        leader = Leader()
        leader.commit(schema_record(1), schema_record(2))
        follower = RegistryFollower(leader)
        assert not follower.ready
        follower.start()
        try:
            await until(lambda: follower.ready)
            assert sorted(follower.state.ids) == [1, 2] and follower.position == 2
            leader.commit(schema_record(3))
            assert await follower.sync(5.0)  # a fetch sent after the commit is applied
            assert 3 in follower.state.ids
        finally:
            await follower.stop()

    asyncio.run(run())


def test_a_copy_of_a_broker_that_leads_is_not_served_and_catches_up_after() -> None:
    async def run() -> None:
        leader = Leader()
        leader.commit(schema_record(1))
        follower = RegistryFollower(leader)
        follower.start()
        try:
            await until(lambda: follower.ready)
            leader.elsewhere = False  # this broker leads now: its loaded registry answers
            await until(lambda: not follower.ready)
            leader.commit(schema_record(2))  # written while this broker led
            leader.elsewhere = True
            await until(lambda: follower.ready)
            assert sorted(follower.state.ids) == [1, 2]  # kept its records, fetched the rest
        finally:
            await follower.stop()

    asyncio.run(run())


def test_a_removed_log_start_reads_the_topic_again() -> None:
    async def run() -> None:
        leader = Leader()
        leader.commit(schema_record(1))
        follower = RegistryFollower(leader)
        follower.position = 0
        leader.log_start = 1  # offset 0 is gone (e.g. deleted records)
        leader.batches = []
        leader.commit(schema_record(2))
        follower.start()
        try:
            await until(lambda: follower.ready)
            assert sorted(follower.state.ids) == [2] and follower.position == 2
        finally:
            await follower.stop()

    asyncio.run(run())


def test_a_sync_without_a_reachable_leader_gives_up() -> None:
    async def run() -> None:
        leader = Leader()
        leader.elsewhere = False
        follower = RegistryFollower(leader)
        follower.start()
        try:
            assert not await follower.sync(0.2)
        finally:
            await follower.stop()

    asyncio.run(run())


def _coordinator() -> RegistryCoordinator:
    """A registry coordinator of a broker that leads no `_schemas` partition."""

    class NoTopic:
        def num_partitions(self) -> int | None:
            return None

    return RegistryCoordinator(StateStore("_schemas", NoTopic(), lambda: 0),
                               asyncio.get_running_loop(), max_schema_bytes=1 << 20)


def test_the_coordinator_serves_reads_from_the_copy_and_refuses_changes() -> None:
    async def run() -> None:
        coordinator = _coordinator()
        with pytest.raises(err.RegistryError) as no_copy:
            coordinator.registry()
        assert no_copy.value.code == 50004
        leader = Leader()
        leader.commit(schema_record(1))
        coordinator.follow(leader)
        try:
            assert coordinator.follower is not None
            await until(lambda: coordinator.following)
            registry = coordinator.registry()
            assert 1 in registry.state.ids
            assert coordinator.registry() is registry  # one registry over the copy
            with pytest.raises(err.RegistryError) as change:
                coordinator.registry(write=True)
            assert change.value.code == 50004  # the HTTP layer forwards it to the writer
            with pytest.raises(err.RegistryError) as journal:
                await registry.journal.write([])
            assert journal.value.code == 50004
        finally:
            await coordinator.stop()

    asyncio.run(run())


async def _get(app: object, path: str) -> tuple[int, dict]:
    """One GET through the ASGI app, on the running loop."""
    import json

    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    scope = {"type": "http", "http_version": "1.1", "method": "GET", "path": path,
             "raw_path": path.encode(), "query_string": b"", "headers": [],
             "scheme": "http", "server": ("127.0.0.1", 8081), "client": ("127.0.0.1", 1)}
    await app(scope, receive, send)  # type: ignore[operator]
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body)


def test_a_read_that_finds_nothing_catches_the_copy_up_first() -> None:
    """A schema registered through another broker a moment ago: the copy has not fetched it
    when the GET arrives; the HTTP layer syncs the copy before it answers 404."""
    from strom.registry.http import registry_app

    async def run() -> None:
        coordinator = _coordinator()
        leader = Leader()
        leader.commit(schema_record(1))
        coordinator.follow(leader)
        syncs: list[float] = []

        async def sync(timeout_s: float) -> None:
            syncs.append(timeout_s)
            if len(syncs) == 1:
                leader.commit(schema_record(2))  # registered elsewhere just now
            await coordinator.sync(timeout_s)

        app = registry_app(coordinator.registry, sync=sync)
        try:
            await until(lambda: coordinator.following)
            assert (await _get(app, "/schemas/ids/1"))[1]["guid"] == "guid-1"
            assert syncs == []  # found: no wait
            assert (await _get(app, "/schemas/ids/2"))[1]["guid"] == "guid-2"
            assert syncs == [1.0]
            status, body = await _get(app, "/schemas/ids/3")  # missing everywhere: 404 still
            assert (status, body["error_code"]) == (404, 40403)
            status, body = await _get(app, "/subjects/other/versions")
            assert (status, body["error_code"]) == (404, 40401)
            assert len(syncs) == 3
        finally:
            await coordinator.stop()

    asyncio.run(run())
