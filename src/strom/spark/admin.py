"""Driver-side broker queries: which partitions a query reads and their offsets.

This is the source's counterpart of Spark's KafkaOffsetReaderAdmin: topic metadata and
ListOffsets through the Kafka admin API (confluent-kafka), with Spark's retry options. The
client is created on first use and dropped when the object is pickled, so a reader holding an
:class:`OffsetReader` can still be shipped to executors.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from strom.spark.offsets import PartitionOffsets, tp_text
from strom.spark.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SourceOptions,
    StromOptionError,
    TopicPartition,
    librdkafka_config,
)

log = logging.getLogger("strom.spark")

REQUEST_TIMEOUT_S = 30.0


class OffsetReader:
    """Resolves subscriptions and offset specs against the cluster (driver only)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Any = None
        self._partitions: list[TopicPartition] | None = None
        self._partitions_at = 0.0

    # -- lifecycle ----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None  # clients never travel: they hold threads and sockets
        return state

    def _client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            conf: dict[str, Any] = librdkafka_config(self.options.kafka)
            for key in ("group.id", "isolation.level"):  # consumer-only settings
                conf.pop(key, None)
            conf.setdefault("client.id", f"{self.options.group_id_prefix}-{uuid.uuid4().hex[:8]}-driver")
            conf["logger"] = logging.getLogger("strom.spark.librdkafka")
            try:
                self._admin = AdminClient(conf)
            except Exception as e:
                raise StromOptionError(f"invalid Kafka client configuration: {e}") from None
        return self._admin

    def close(self) -> None:
        self._admin = None  # confluent-kafka clients are released when unreferenced

    # -- retries ------------------------------------------------------------------------------

    def _with_retries(self, what: str, func: Any) -> Any:
        attempts = self.options.fetch_offset_retries
        for attempt in range(1, attempts + 1):
            try:
                return func()
            except StromOptionError:
                raise
            except Exception as e:
                if attempt >= attempts:
                    raise RuntimeError(f"{what} failed after {attempts} attempts: {e}") from e
                log.warning("attempt %d to %s failed: %s", attempt, what, e)
                time.sleep(self.options.fetch_offset_retry_interval_ms / 1000.0)
                self._admin = None
        raise AssertionError("unreachable")

    # -- partitions ---------------------------------------------------------------------------

    def partitions(self, *, fresh: bool = False) -> list[TopicPartition]:
        """The topic-partitions the subscription selects now (cached for metadataRefreshMs)."""
        now = time.monotonic()
        age_ms = (now - self._partitions_at) * 1000
        if fresh or self._partitions is None or age_ms >= self.options.metadata_refresh_ms:
            self._partitions = self._with_retries("list topic metadata", self._fetch_partitions)
            self._partitions_at = now
        return list(self._partitions)

    def _fetch_partitions(self) -> list[TopicPartition]:
        sub = self.options.subscription
        if sub.kind == "assign":
            return sorted(sub.partitions)
        md = self._client().list_topics(timeout=REQUEST_TIMEOUT_S)
        result: list[TopicPartition] = []
        for name, topic in md.topics.items():
            if topic.error is not None or not sub.wants_topic(name):
                continue
            result.extend((name, p) for p in topic.partitions)
        return sorted(result)

    # -- offsets ------------------------------------------------------------------------------

    def _list_offsets(self, specs: Mapping[TopicPartition, Any]) -> dict[TopicPartition, Any]:
        """One ListOffsets round for ``{tp: confluent OffsetSpec}`` -> ``{tp: result info}``."""
        if not specs:
            return {}

        def run() -> dict[TopicPartition, Any]:
            from confluent_kafka import IsolationLevel
            from confluent_kafka import TopicPartition as CTP

            level = (IsolationLevel.READ_COMMITTED if self.options.read_committed
                     else IsolationLevel.READ_UNCOMMITTED)
            futures = self._client().list_offsets(
                {CTP(t, p): spec for (t, p), spec in specs.items()},
                isolation_level=level, request_timeout=REQUEST_TIMEOUT_S)
            return {(ctp.topic, ctp.partition): f.result() for ctp, f in futures.items()}

        return self._with_retries("list offsets", run)

    def earliest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        from confluent_kafka.admin import OffsetSpec as CSpec

        return {tp: r.offset for tp, r in self._list_offsets({tp: CSpec.earliest() for tp in tps}).items()}

    def latest(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """End offsets: the high watermark, or the last stable offset under read_committed."""
        from confluent_kafka.admin import OffsetSpec as CSpec

        return {tp: r.offset for tp, r in self._list_offsets({tp: CSpec.latest() for tp in tps}).items()}

    def earliest_lenient(self, tps: Iterable[TopicPartition]) -> PartitionOffsets:
        """Earliest offsets of the partitions that still exist (deleted ones are left out)."""
        tps = list(tps)
        try:
            return self.earliest(tps)  # one round trip when every partition is there
        except RuntimeError:
            pass
        result: PartitionOffsets = {}
        for tp in tps:
            try:
                result.update(self.earliest([tp]))
            except RuntimeError as e:
                log.warning("cannot find the earliest offset of %s: %s", tp_text(tp), e)
        return result

    def for_timestamps(self, stamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        """The first offset whose timestamp is >= the given one, or None when there is none."""
        from confluent_kafka.admin import OffsetSpec as CSpec

        found = self._list_offsets({tp: CSpec.for_timestamp(ts) for tp, ts in stamps.items()})
        return {tp: (r.offset if r.offset is not None and r.offset >= 0 else None)
                for tp, r in found.items()}

    # -- resolving a spec ---------------------------------------------------------------------

    def resolve(self, spec: OffsetSpec, *, starting: bool,
                partitions: list[TopicPartition] | None = None) -> PartitionOffsets:
        """Concrete offsets for ``spec`` over the subscribed partitions."""
        tps = self.partitions(fresh=True) if partitions is None else partitions
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "offsets":
            return self._resolve_specific(spec.offset_map, tps, starting)
        if spec.kind == "timestamps":
            stamps = spec.offset_map
            self._check_same_partitions(stamps, tps, "startingOffsetsByTimestamp" if starting
                                        else "endingOffsetsByTimestamp")
        else:
            assert spec.timestamp is not None
            stamps = {tp: spec.timestamp for tp in tps}
        return self._resolve_timestamps(stamps, spec, starting)

    def _check_same_partitions(self, given: Mapping[TopicPartition, int],
                               tps: list[TopicPartition], option: str) -> None:
        if set(given) != set(tps):
            raise StromOptionError(
                f"If {option} contains specific offsets, you must specify all TopicPartitions.\n"
                "Use -1 for latest, -2 for earliest.\n"
                f"Specified: {sorted(tp_text(tp) for tp in given)} "
                f"Assigned: {sorted(tp_text(tp) for tp in tps)}")

    def _resolve_specific(self, given: Mapping[TopicPartition, int], tps: list[TopicPartition],
                          starting: bool) -> PartitionOffsets:
        self._check_same_partitions(given, tps, "startingOffsets" if starting else "endingOffsets")
        result = {tp: off for tp, off in given.items() if off >= 0}
        need_earliest = [tp for tp, off in given.items() if off == EARLIEST]
        need_latest = [tp for tp, off in given.items() if off == LATEST]
        bad = [tp for tp, off in given.items() if off < 0 and off not in (EARLIEST, LATEST)]
        if bad:
            raise StromOptionError(f"invalid offsets for {sorted(tp_text(tp) for tp in bad)}: "
                                   "use an offset >= 0, -2 (earliest) or -1 (latest)")
        result.update(self.earliest(need_earliest))
        result.update(self.latest(need_latest))
        return result

    def _resolve_timestamps(self, stamps: Mapping[TopicPartition, int], spec: OffsetSpec,
                            starting: bool) -> PartitionOffsets:
        found = self.for_timestamps(stamps)
        unmatched = [tp for tp, off in found.items() if off is None]
        result = {tp: off for tp, off in found.items() if off is not None}
        if unmatched:
            if starting and spec.on_no_match == "error":
                raise StromOptionError(
                    "No offset matched the given timestamp for "
                    f"{sorted(tp_text(tp) for tp in unmatched)} (no record at or after it). Set "
                    "startingOffsetsByTimestampStrategy to 'latest' to start those partitions "
                    "from the latest offset instead.")
            # ending offsets (and the "latest" strategy) fall back to the latest offset
            result.update(self.latest(unmatched))
        return result
