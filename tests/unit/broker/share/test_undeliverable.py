"""Which batches a share consumer never gets: control batches always, and under read_committed
the batches of aborted transactions (found from the log's index of aborted transactions, as a
read_committed consumer finds them)."""

from __future__ import annotations

from strom.broker.share.manager import _undeliverable
from strom.record.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader


def batch(base: int, last: int, pid: int = -1, *, txn: bool = False,
          control: bool = False) -> BatchHeader:
    attributes = (TRANSACTIONAL_MASK if txn or control else 0) | (CONTROL_MASK if control else 0)
    return BatchHeader(base, 100, 0, 2, 0, attributes, last - base, 0, 0, pid, 0, 0,
                       last - base + 1)


class Log:
    """The log's aborted-transaction index: (producer id, first offset) overlapping a range."""

    def __init__(self, aborted: list[tuple[int, int]]) -> None:
        self.aborted = aborted
        self.asked: list[tuple[int, int]] = []

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        self.asked.append((fetch_offset, upper))
        return self.aborted


# offsets: 0 plain | 1-2 txn pid 7 (aborted) | 3-4 txn pid 8 (committed) | 5 abort marker 7
#          | 6 commit marker 8 | 7-8 txn pid 7 again (a later, committed transaction) | 9 marker 7
HEADERS = [batch(0, 0), batch(1, 2, 7, txn=True), batch(3, 4, 8, txn=True),
           batch(5, 5, 7, control=True), batch(6, 6, 8, control=True),
           batch(7, 8, 7, txn=True), batch(9, 9, 7, control=True)]


def test_read_uncommitted_skips_only_control_batches():
    assert _undeliverable(HEADERS, 0, None) == [(5, 5), (6, 6), (9, 9)]


def test_read_committed_also_skips_the_aborted_transaction_and_nothing_else():
    log = Log([(7, 1)])
    assert _undeliverable(HEADERS, 0, log) == [(1, 2), (5, 5), (6, 6), (9, 9)]
    assert log.asked == [(0, 10)]


def test_a_read_from_inside_a_batch_or_transaction():
    # reading from offset 2: the aborted transaction began before it, its batch is cut there
    assert _undeliverable(HEADERS[1:], 2, Log([(7, 1)])) == [(2, 2), (5, 5), (6, 6), (9, 9)]
    assert _undeliverable([], 0, Log([(7, 1)])) == []
