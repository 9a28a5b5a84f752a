"""The record scan of schema-validated topics: aiokafka's compiled parser (`scan`) reads each
record's key, value and headers as the Python scan does, whatever the codec."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from strom.broker.schema_check import scan, scan_in_python
from strom.record import CorruptRecordError


def _batch(codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=10**7)
    for i in range(50):
        builder.append(i, timestamp=1_700_000_000_000 + i,
                       key=None if i % 3 == 0 else f"k{i}".encode(),
                       value=None if i % 7 == 0 else b"\x00\x00\x00\x00\x01" + bytes(i),
                       headers=[("__value_schema_id", b"\x01" + bytes(16))] if i % 5 == 0
                       else [("h", None)] if i % 11 == 0 else [])
    return bytes(builder.build())


def _plain(records: list) -> list:
    return [(None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value),
             list(r.headers)) for r in records]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4], ids=["none", "gzip", "snappy", "lz4", "zstd"])
def test_both_scans_read_the_same_records(codec: int) -> None:
    batch = _batch(codec)
    assert _plain(scan(batch)) == _plain(scan_in_python(batch))
    assert len(scan(batch)) == 50


def test_a_truncated_batch_is_corrupt_for_both() -> None:
    batch = _batch(0)
    broken = batch[:8] + (len(batch) - 12 - 40).to_bytes(4, "big") + batch[12:-40]  # records cut
    for reader in (scan, scan_in_python):
        with pytest.raises(CorruptRecordError):
            reader(broken)
