"""Which log dir keeps each replica, told to the controller (AssignReplicasToDirs, KIP-858).

A KRaft broker with several ``log.dirs`` reports, for every partition it keeps, the directory
id (meta.properties' ``directory.id``) of the log dir its log is in, whenever the metadata does
not say so yet: a new replica, a log moved by AlterReplicaLogDirs, a broker restarted with a
partition in another dir. The controller keeps it in the partition's record, as Kafka's does;
with it the cluster knows which partitions a failed disk held. A broker with one log dir sends
nothing (Kafka's controller assigns a lone dir by itself).

Requests go in batches to the active controller, with the broker's current epoch; a refused
or unanswered one is tried again later, and the metadata, once it shows the directory, ends
the work for that replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from strom.cluster.image import MetadataImage
from strom.common.tasks import cancel_all
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.checkpoints import topic_id_from_str, topic_id_to_str
from strom.storage.manager import LogManager

log = logging.getLogger("strom.broker.kraft")

VERSION = 0
# a batch's size (Kafka's AssignmentsManager sends at most 2,250 partitions at once)
MAX_PER_REQUEST = 2250
# after a failed request, try again this much later (a back-off, not a wait for something)
RETRY_S = 1.0
# how long to gather wake-ups before looking again (a debounce, not a wait for something)
COALESCE_S = 0.1
# a replica the controller refused (deleted or reassigned meanwhile) is asked for again only
# this much later, should the metadata still call for it
REFUSED_RETRY_S = 30.0

Send = Callable[[ApiKey, int, Mapping[str, Any]], Awaitable[Any]]
Item = tuple[str, uuid.UUID, int]  # (directory id, topic id, partition)


class DirectoryAssignments:
    """Keeps the controller told where this broker's replicas live (see the module doc)."""

    def __init__(self, broker_id: int, image: MetadataImage, logs: LogManager,
                 dir_ids: Mapping[Path, str], send: Send, epoch: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self.image = image
        self.logs = logs
        self.dir_ids = dict(dir_ids)
        self._send = send
        self._epoch = epoch
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._refused: dict[Item, float] = {}  # item -> monotonic time of the refusal

    def wake(self, *_: object) -> None:
        """Something may have moved or been created: look again (a metadata change, a log
        placed in a dir; a log dir back online reloads its logs in a worker thread)."""
        loop = self._loop
        if loop is None:
            return
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            self._wake.set()
        else:
            loop.call_soon_threadsafe(self._wake.set)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks = [self._loop.create_task(self._run(), name="dir-assignments")]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks = []

    def pending(self) -> list[Item]:
        """Every local replica whose directory the metadata does not show (less those the
        controller refused lately)."""
        out = []
        now = time.monotonic()
        for plog in self.logs.logs():
            topic = self.image.topics.get(plog.topic)
            state = topic.partitions.get(plog.partition) if topic is not None else None
            if topic is None or state is None or self.broker_id not in state.replicas \
                    or plog.topic_id != topic.topic_id:
                continue
            where = self.logs.dir_of(plog.topic, plog.partition)
            directory = self.dir_ids.get(where) if where is not None else None
            if directory is None or state.directories.get(self.broker_id) == directory:
                continue
            item = (directory, topic.topic_id, plog.partition)
            if now - self._refused.get(item, -REFUSED_RETRY_S) >= REFUSED_RETRY_S:
                out.append(item)
        return out

    async def _report(self, batch: list[Item]) -> bool:
        """One AssignReplicasToDirs: whether the controller answered it."""
        grouped: dict[str, dict[uuid.UUID, list[int]]] = {}
        for directory, topic_id, partition in batch:
            grouped.setdefault(directory, {}).setdefault(topic_id, []).append(partition)
        body = {"broker_id": self.broker_id, "broker_epoch": self._epoch(), "directories": [
            {"id_": topic_id_from_str(d), "topics": [
                {"topic_id": t, "partitions": [{"partition_index": p} for p in parts]}
                for t, parts in topics.items()]}
            for d, topics in grouped.items()]}
        try:
            response = await self._send(ApiKey.ASSIGN_REPLICAS_TO_DIRS, VERSION, body)
        except KafkaError as exc:
            log.info("directory assignments not sent: %s", exc.message)
            return False
        if response.error_code != ErrorCode.NONE:
            log.info("the controller refused directory assignments: %s",
                     ErrorCode(response.error_code).name)
            return False
        now = time.monotonic()
        for d in response.directories:
            directory = topic_id_to_str(d.id_)
            for t in d.topics:
                for p in t.partitions:
                    if p.error_code != ErrorCode.NONE:
                        log.info("the controller refused the directory of %s-%d: %s", t.topic_id,
                                 p.partition_index, ErrorCode(p.error_code).name)
                        self._refused[(directory, t.topic_id, int(p.partition_index))] = now
        return True

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            retry = False
            stale = time.monotonic() - REFUSED_RETRY_S
            self._refused = {k: t for k, t in self._refused.items() if t > stale}
            work = self.pending() if self._epoch() >= 0 else []
            for i in range(0, len(work), MAX_PER_REQUEST):
                if not await self._report(work[i:i + MAX_PER_REQUEST]):
                    retry = True
                    break
            # reported: the metadata shows it soon (a change wakes this); a partition the
            # controller refused (deleted meanwhile, reassigned away) drops out of `pending`
            timeout = RETRY_S if retry or work else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            # a burst of metadata changes (thousands of partitions created) is looked at once,
            # not once per change: each look walks every local log
            await asyncio.sleep(COALESCE_S)

