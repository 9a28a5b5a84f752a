"""Combining state batches as Kafka's share coordinator does (its PersisterStateBatchCombiner).

The stored batches of a share partition and the batches of a write (or of a replayed
ShareUpdate) are combined into one sorted list of non-overlapping batches:

- batches wholly below the start offset are dropped, and one that straddles it is cut to begin
  at it (a start offset of -1 keeps everything);
- where batches overlap, each offset takes the state of the batch with the highest delivery
  count, then the highest delivery state (a record delivered again, or acknowledged/archived,
  never goes back to an older state);
- neighbouring runs with the same state and count are joined.

Strom's `not_before_ms` (the end of a redelivery delay) rides along: among batches of the same
count and state the latest end wins, and runs join only when it is equal too.
"""

from __future__ import annotations

from collections.abc import Iterable

from strom.coordinator.share.state import StateBatch


def _pruned(batches: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    out = []
    for b in batches:
        if start_offset != -1 and b.last_offset < start_offset:
            continue
        if start_offset != -1 and b.first_offset < start_offset:
            b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count,
                           b.not_before_ms)
        out.append(b)
    return out


def combine(so_far: Iterable[StateBatch], new: Iterable[StateBatch],
            start_offset: int) -> list[StateBatch]:
    """The combined batches of `so_far` and `new` from `start_offset` on."""
    batches = _pruned(so_far, start_offset) + _pruned(new, start_offset)
    if len(batches) <= 1:
        return batches
    # A sweep over the batch boundaries: at each boundary the winning (count, state, not
    # before) among the batches covering the offsets from there on decides them.
    events: list[tuple[int, int, tuple[int, int, int]]] = []
    for b in batches:
        priority = (b.delivery_count, b.delivery_state, b.not_before_ms)
        events.append((b.first_offset, 1, priority))
        events.append((b.last_offset + 1, -1, priority))
    events.sort(key=lambda e: e[0])
    active: dict[tuple[int, int, int], int] = {}
    out: list[StateBatch] = []
    open_from = -1
    winner: tuple[int, int, int] | None = None
    i = 0
    while i < len(events):
        offset = events[i][0]
        if winner is not None and offset > open_from:
            _append(out, open_from, offset - 1, winner)
        while i < len(events) and events[i][0] == offset:
            _, delta, priority = events[i]
            count = active.get(priority, 0) + delta
            if count:
                active[priority] = count
            else:
                active.pop(priority, None)
            i += 1
        winner = max(active) if active else None
        open_from = offset
    return out


def _append(out: list[StateBatch], first: int, last: int,
            winner: tuple[int, int, int]) -> None:
    count, state, not_before = winner
    if out:
        tail = out[-1]
        if (tail.last_offset + 1 == first and tail.delivery_state == state
                and tail.delivery_count == count and tail.not_before_ms == not_before):
            out[-1] = StateBatch(tail.first_offset, last, state, count, not_before)
            return
    out.append(StateBatch(first, last, state, count, not_before))
