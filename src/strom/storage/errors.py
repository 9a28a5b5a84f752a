"""Storage errors carrying the Kafka error code the broker should answer with.

The codes are `ErrorCode` members (``strom.protocol.errors``, a leaf module importing only
``enum``): storage names no error number of its own. Hierarchy:

- `StorageError` (``error_code`` KAFKA_STORAGE_ERROR unless a subclass or the raiser says
  otherwise): what the produce, fetch and offsets handlers turn into a partition's error code.
- `CorruptRecordError` is both a `StorageError` (CORRUPT_MESSAGE) and ``strom.record``'s
  `CorruptRecordError`: storage raises it for bad batches, wrapping the record package's one,
  so ``except strom.record.CorruptRecordError`` catches corruption from either layer.
  ``strom.storage.segment.CorruptSegmentError`` subclasses it for damage inside a segment file.
"""

from __future__ import annotations

from strom import record
from strom.protocol.errors import ErrorCode


class StorageError(Exception):
    """A storage failure; ``error_code`` is the Kafka error code for the response.
    ``record_errors`` (index in the batch, message) name the records a batch was rejected for
    (Kafka's RecordValidationException, KIP-467): Produce v8+ reports them with the message."""

    error_code: int = ErrorCode.KAFKA_STORAGE_ERROR
    record_errors: tuple[tuple[int, str], ...] = ()

    def __init__(self, message: str, error_code: int | None = None,
                 record_errors: tuple[tuple[int, str], ...] = ()) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code
        if record_errors:
            self.record_errors = record_errors

    @property
    def message(self) -> str:
        return str(self)


class OffsetOutOfRangeError(StorageError):
    error_code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptRecordError(StorageError, record.CorruptRecordError):
    """Bytes that cannot be a valid batch, answered with CORRUPT_MESSAGE."""

    error_code = ErrorCode.CORRUPT_MESSAGE


class MessageTooLargeError(StorageError):
    error_code = ErrorCode.MESSAGE_TOO_LARGE


class RecordListTooLargeError(StorageError):
    error_code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidTimestampError(StorageError):
    error_code = ErrorCode.INVALID_TIMESTAMP


class KafkaStorageError(StorageError):
    error_code = ErrorCode.KAFKA_STORAGE_ERROR


class UnsupportedCompressionTypeError(StorageError):
    error_code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(StorageError):
    error_code = ErrorCode.INVALID_RECORD
