"""Storage errors carrying the Kafka error code the broker should answer with."""

from __future__ import annotations

OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
RECORD_LIST_TOO_LARGE = 18
INVALID_TIMESTAMP = 32
KAFKA_STORAGE_ERROR = 56
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87


class StorageError(Exception):
    """A storage failure; ``error_code`` is the Kafka error code for the response."""

    error_code = KAFKA_STORAGE_ERROR

    def __init__(self, message: str, error_code: int | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code

    @property
    def message(self) -> str:
        return str(self)


class OffsetOutOfRangeError(StorageError):
    error_code = OFFSET_OUT_OF_RANGE


class CorruptRecordError(StorageError):
    error_code = CORRUPT_MESSAGE


class MessageTooLargeError(StorageError):
    error_code = MESSAGE_TOO_LARGE


class RecordListTooLargeError(StorageError):
    error_code = RECORD_LIST_TOO_LARGE


class InvalidTimestampError(StorageError):
    error_code = INVALID_TIMESTAMP


class KafkaStorageError(StorageError):
    error_code = KAFKA_STORAGE_ERROR


class UnsupportedCompressionTypeError(StorageError):
    error_code = UNSUPPORTED_COMPRESSION_TYPE


class InvalidRecordError(StorageError):
    error_code = INVALID_RECORD
