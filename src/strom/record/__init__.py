"""strom.record: Kafka's v2 record format (magic 2), as Kafka's ``org.apache.kafka.common.record``.

Both the wire (Produce requests, Fetch responses, the replica fetcher) and the disk (segments,
recovery, the cleaner, producer state) carry the very same batch bytes, so the format sits below
both ``strom.protocol`` and ``strom.storage`` rather than inside either: storage can read a batch
without importing request codecs, and the protocol layer without importing the log.

Modules, by concern:

- `batch`: the 61-byte header's layout, attribute flags, CRC32C, in-place patches, iteration (the
  hot paths: Produce and Fetch never decode a record);
- `varint`: zig-zag varints of record fields;
- `compression`: codec ids, compress/decompress of a records section;
- `records`: record decoding and encoding, building batches, transaction control records;
- `errors`: `CorruptRecordError`, the base of every corruption error (storage's subclasses it).

Import rule (``tests/unit/test_import_cycles.py`` checks it): this package imports no other Strom
package; it is pure (no I/O, no logging) and knows nothing of requests or files. The names below
are its public API; ``from strom import record as R`` then ``R.read_header`` costs what a module
global did before.
"""

from strom.record.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER_STRUCT,
    I16,
    I32,
    I64,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    RECORDS_OFFSET,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    U32,
    BatchHeader,
    compute_crc,
    crc_ok,
    iter_batches,
    patch_base_offset,
    patch_leader_epoch,
    read_header,
    set_log_append_time,
)
from strom.record.compression import (
    COMPRESSION_CODES,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    compress,
    decompress,
)
from strom.record.errors import CorruptRecordError
from strom.record.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    control_batch,
    decode_records,
    parse_control_record,
    records_have_keys,
    records_section,
)
from strom.record.varint import read_varint, write_varint

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "COMPRESSION_CODES",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_MASK",
    "COMPRESSION_NAMES",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "CONTROL_MASK",
    "CRC_OFFSET",
    "DELETE_HORIZON_MASK",
    "HEADER_STRUCT",
    "I16",
    "I32",
    "I64",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAGIC_V2",
    "MAX_TIMESTAMP_OFFSET",
    "MIN_BATCH_LENGTH",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORDS_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "U32",
    "BatchHeader",
    "CorruptRecordError",
    "Record",
    "build_batch",
    "compress",
    "compute_crc",
    "control_batch",
    "crc_ok",
    "decode_records",
    "decompress",
    "iter_batches",
    "parse_control_record",
    "patch_base_offset",
    "patch_leader_epoch",
    "read_header",
    "read_varint",
    "records_have_keys",
    "records_section",
    "set_log_append_time",
    "write_varint",
]
