"""The registry on a broker that does not write it: a copy kept by tailing `_schemas`.

Confluent's followers read the `_schemas` topic into their own store and answer reads from it,
forwarding only changes to the leader. Strom's do the same: a `RegistryFollower` fetches
`_schemas-0` from its leader as a consumer would (committed records only, up to the high
watermark) and applies each record to its own `RegistryState`, so every broker can answer
reads and validate produced records without asking the writer.

A follower's copy may trail the writer by a fetch. Where that matters it first catches up
(`sync`): after a change it forwarded (so a client reads its own write from the broker it
asked), and before refusing a produced record (the record may name a schema registered a
moment ago). A copy is served only once it has caught up with the leader's high watermark;
while this broker itself leads `_schemas` the copy is set aside and caught up again afterwards
(the committed records it has stay valid: a new leader keeps every committed record).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from strom.common.tasks import cancel_and_wait
from strom.record import BatchHeader, CorruptRecordError, decode_records, iter_batches
from strom.registry import errors as err
from strom.registry.state import SCHEMAS_TOPIC, Json, RegistryState, decode

log = logging.getLogger("strom.registry")

BACKOFF_S = 0.5  # no leader to fetch from (or this broker leads): ask again this often
SYNC_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Fetched:
    """One fetch of `_schemas-0` from its leader: record batches from the asked offset (up to
    the high watermark), the high watermark, and the log start offset."""

    batches: bytes | memoryview | None
    high_watermark: int
    log_start_offset: int
    out_of_range: bool = False


class SchemasFeed(Protocol):
    """How a follower reaches `_schemas-0` on its leader (the broker's inter-broker client)."""

    def leader_elsewhere(self) -> bool:
        """True when another live broker leads `_schemas-0` (False: none, or this one)."""

    async def fetch(self, offset: int) -> Fetched | None:
        """Records from `offset`, waiting a while for new ones; None when the leader cannot be
        asked now (moved, unreachable, refused)."""

    async def close(self) -> None: ...


class _ReadOnly:
    """The journal of a follower's registry: changes go to the writer (HTTP forwards them)."""

    async def write(self, records: Sequence[tuple[Json, Json | None]]) -> None:
        raise err.unknown_leader("this broker does not lead _schemas")


class RegistryFollower:
    """Keeps `state` equal to `_schemas-0`'s committed records, fetched from its leader."""

    def __init__(self, feed: SchemasFeed) -> None:
        self.feed = feed
        self.state = RegistryState()
        self.position = 0  # the next offset to apply
        self.ready = False  # caught up with the leader's high watermark since (re)starting
        self._rounds_sent = 0
        self._rounds_done = 0
        self._progress = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                 name="registry-follower")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self.feed.close()

    async def sync(self, timeout_s: float = SYNC_TIMEOUT_S) -> bool:
        """Wait until the copy has everything the leader had committed when this was called
        (a fetch sent after the call has been applied); False when that took too long."""
        target = self._rounds_sent + 1
        async with self._progress:
            try:
                await asyncio.wait_for(
                    self._progress.wait_for(lambda: self._rounds_done >= target), timeout_s)
            except TimeoutError:
                return False
        return True

    async def _run(self) -> None:
        while True:
            if not self.feed.leader_elsewhere():
                self.ready = False  # this broker leads (its loaded registry answers), or none
                await asyncio.sleep(BACKOFF_S)
                continue
            self._rounds_sent += 1
            try:
                fetched = await self.feed.fetch(self.position)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("schema registry: fetching %s failed", SCHEMAS_TOPIC)
                fetched = None
            if fetched is None:
                self._failures += 1
                await asyncio.sleep(BACKOFF_S)
                continue
            if self._failures:
                log.info("schema registry: following %s again after %d failed fetches",
                         SCHEMAS_TOPIC, self._failures)
                self._failures = 0
            if fetched.out_of_range:  # the log start moved past us: read it all again
                log.warning("schema registry: offset %d of %s is gone (log start %d): "
                            "reading the topic again from there", self.position,
                            SCHEMAS_TOPIC, fetched.log_start_offset)
                self.state, self.ready = RegistryState(), False
                self.position = max(fetched.log_start_offset, 0)
                await asyncio.sleep(0)
                continue
            if not self._apply(fetched.batches):
                await asyncio.sleep(BACKOFF_S)
                continue
            async with self._progress:
                if self.position >= fetched.high_watermark:
                    if not self.ready:
                        log.info("schema registry: following %s at offset %d: %d subjects, "
                                 "%d schemas", SCHEMAS_TOPIC, self.position,
                                 len(self.state.subjects), len(self.state.ids))
                    self.ready = True
                self._rounds_done += 1
                self._progress.notify_all()
            await asyncio.sleep(0)  # a long topic: let the loop run between fetches

    def _apply(self, batches: bytes | memoryview | None) -> bool:
        """Apply the fetched records past `position`; False when the batches cannot be framed
        (fetched again after a pause)."""
        if not batches:
            return True
        data = memoryview(batches)
        try:
            for pos, header in iter_batches(data):
                self._apply_batch(data, pos, header)
        except CorruptRecordError as exc:
            log.error("schema registry: unreadable data in %s at offset %d: %s", SCHEMAS_TOPIC,
                      self.position, exc)
            return False
        return True

    def _apply_batch(self, data: memoryview, pos: int, header: BatchHeader) -> None:
        end = header.base_offset + header.last_offset_delta + 1
        if end <= self.position:
            return
        if not header.is_control:  # the registry writes no transactions
            try:
                records = decode_records(bytes(data[pos:pos + header.size]))
            except CorruptRecordError as exc:
                log.error("schema registry: skipping an unreadable batch of %s at offset %d: "
                          "%s", SCHEMAS_TOPIC, header.base_offset, exc)
                records = []
            for r in records:
                if r.offset < self.position or r.key is None:
                    continue
                try:
                    key = decode(r.key)
                    if key is not None:
                        self.state.apply(key, decode(r.value))
                except (ValueError, KeyError, TypeError) as exc:
                    log.error("skipping an unreadable %s record at offset %d: %s",
                              SCHEMAS_TOPIC, r.offset, exc)
        self.position = end


def read_only_journal() -> _ReadOnly:
    return _ReadOnly()

