"""Compression of a batch's records section: the codec ids of the attributes' low 3 bits.

Kafka's four codecs through cramjam (one Rust extension for all of them). Snappy is read both raw
(as librdkafka writes it) and xerial-framed (as the Java clients write it) and written raw. Any
decompression failure is a `CorruptRecordError`; only the slow paths (recompression, compacted
topics' key checks, tools) get here.
"""

from __future__ import annotations

import struct

import cramjam

from strom.record.buffers import Buf
from strom.record.errors import CorruptRecordError

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COMPRESSION_CODES = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

_I32 = struct.Struct(">i")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_decompress(data: Buf) -> bytes:
    """Raw snappy (librdkafka) or xerial-framed snappy (Java clients)."""
    mv = memoryview(data)
    if len(mv) > 16 and bytes(mv[:8]) == _XERIAL_MAGIC:
        out = []
        pos, end = 16, len(mv)
        while pos < end:
            if pos + 4 > end:
                raise CorruptRecordError("truncated xerial snappy block header")
            n = _I32.unpack_from(mv, pos)[0]
            pos += 4
            if n < 0 or pos + n > end:
                raise CorruptRecordError("truncated xerial snappy block")
            out.append(bytes(cramjam.snappy.decompress_raw(mv[pos : pos + n])))
            pos += n
        return b"".join(out)
    return bytes(cramjam.snappy.decompress_raw(mv))


def decompress(codec: int, data: Buf) -> bytes:
    """Decompress a batch's records section."""
    try:
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == COMPRESSION_SNAPPY:
            return _snappy_decompress(data)
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as e:  # cramjam raises its own DecompressionError
        raise CorruptRecordError(f"cannot decompress {COMPRESSION_NAMES[codec]}: {e}") from e
    if codec == COMPRESSION_NONE:
        return bytes(data)
    raise CorruptRecordError(f"unknown compression codec {codec}")


def compress(codec: int, data: Buf, level: int | None = None) -> bytes:
    """Compress a records section; ``level`` None (or -1) means the codec's default."""
    if level is not None and level < 0:
        level = None
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec {codec}")
