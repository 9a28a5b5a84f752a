"""Shared helpers for storage tests (exposed as a session fixture: hypothesis-friendly)."""

import asyncio
import time
import types
import uuid
from pathlib import Path

import pytest

from strom import record as R
from strom.storage import files
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog

TOPIC_ID = uuid.UUID("8f3c4b0e-1d2a-4c5b-9e6f-7a8b9c0d1e2f")


def make_batch(n=1, value_size=10, ts=1_000, *, key=b"k", ts_step=1, compression=0, **kw):
    recs = [R.Record(i, ts + i * ts_step, key, bytes([65 + i % 26]) * value_size) for i in range(n)]
    return R.build_batch(recs, compression=compression, **kw)


def open_log(path, config=None, **kw):
    return PartitionLog(path, "t", 0, TOPIC_ID, config or LogConfig(), **kw)


def scan_segment(seg):
    """(position, header) of every batch in a segment, by reading the whole file."""
    data = seg.log_path.read_bytes() if Path(seg.file.path) == seg.log_path else b""
    return list(R.iter_batches(memoryview(data)))


def batches_in(data: bytes):
    return [(h.base_offset, h.last_offset, bytes(data[p : p + h.size]))
            for p, h in R.iter_batches(memoryview(data))]  # fmt: skip


class Appended:
    """The batches written so far, as the log should hold them (offsets patched)."""

    def __init__(self):
        self.batches = []  # (first offset, last offset, bytes)

    def add(self, data: bytes, first_offset: int, epoch: int):
        buf = bytearray(data)
        off = first_offset
        for pos, h in R.iter_batches(memoryview(bytes(buf))):
            R.patch_base_offset(buf, pos, off)
            R.patch_leader_epoch(buf, pos, epoch)
            self.batches.append((off, off + h.last_offset_delta, bytes(buf[pos : pos + h.size])))
            off += h.last_offset_delta + 1

    def batch_for(self, offset):
        for b in self.batches:
            if b[0] <= offset <= b[1]:
                return b
        return None

    def truncate(self, leo):
        self.batches = [b for b in self.batches if b[1] < leo]


async def max_lag_during(work) -> float:
    """The longest the event loop was late for a 5 ms timer while ``work()`` ran: how long
    the work held the loop at a stretch (checks that disk work runs off the loop)."""
    lag = 0.0
    stop = False

    async def ticker():
        nonlocal lag
        while not stop:
            t0 = time.monotonic()
            await asyncio.sleep(0.005)
            lag = max(lag, time.monotonic() - t0 - 0.005)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # the ticker is waiting on its timer before the work starts
    await work()
    stop = True
    await task
    return lag


@pytest.fixture(scope="session")
def h():
    return types.SimpleNamespace(
        make_batch=make_batch, open_log=open_log, scan_segment=scan_segment,
        batches_in=batches_in, Appended=Appended, TOPIC_ID=TOPIC_ID,
        max_lag_during=max_lag_during,
    )  # fmt: skip


@pytest.fixture(autouse=True, scope="session")
def _no_fsync():
    """Durability against power loss is not under test; fsync makes the suite slow on shared disks."""
    old = files.FSYNC_ENABLED
    files.FSYNC_ENABLED = False
    yield
    files.FSYNC_ENABLED = old
