"""Compression of a records section: every codec round trips, xerial snappy, damage."""

import struct

import cramjam
import pytest

from strom.record.compression import (
    COMPRESSION_CODES,
    COMPRESSION_GZIP,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    compress,
    decompress,
)
from strom.record.errors import CorruptRecordError

DATA = b"".join(b"record %d " % i for i in range(2000))


@pytest.mark.parametrize("codec", sorted(COMPRESSION_NAMES))
@pytest.mark.parametrize("level", [None, -1])
def test_round_trip(codec, level):
    packed = compress(codec, DATA, level)
    if codec != COMPRESSION_NONE:
        assert len(packed) < len(DATA)
    assert decompress(codec, packed) == DATA
    assert decompress(codec, memoryview(packed)) == DATA


def test_names_and_codes_agree():
    assert {COMPRESSION_CODES[name] for name in COMPRESSION_NAMES.values()} == set(COMPRESSION_NAMES)
    assert COMPRESSION_CODES["uncompressed"] == COMPRESSION_NONE


def _xerial(data: bytes, block: int) -> bytes:
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        piece = bytes(cramjam.snappy.compress_raw(data[i : i + block]))
        out += struct.pack(">i", len(piece)) + piece
    return bytes(out)


def test_xerial_framed_snappy():
    assert decompress(COMPRESSION_SNAPPY, _xerial(DATA, 4096)) == DATA
    framed = _xerial(DATA, 4096)
    with pytest.raises(CorruptRecordError, match="xerial"):
        decompress(COMPRESSION_SNAPPY, framed[:-10])  # the last block is cut short
    with pytest.raises(CorruptRecordError, match="xerial"):
        decompress(COMPRESSION_SNAPPY, framed + b"\x00\x00")  # a partial block header


def test_damage_is_a_corrupt_record_error():
    packed = bytearray(compress(COMPRESSION_GZIP, DATA))
    packed[12] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="gzip"):
        decompress(COMPRESSION_GZIP, packed)
    with pytest.raises(CorruptRecordError, match="codec 6"):
        decompress(6, b"")
    with pytest.raises(ValueError, match="codec 6"):
        compress(6, b"")
