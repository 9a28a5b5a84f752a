"""strom.storage: Kafka-compatible on-disk partition logs (segments, indexes, recovery)."""

from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.storage.files import FileBudget, FileSlice, SegmentFile
from strom.storage.log import AppendResult, PartitionLog, ReadResult
from strom.storage.manager import LogManager
from strom.storage.validator import ORIGIN_CLIENT, ORIGIN_COORDINATOR, ORIGIN_REPLICATION

__all__ = [
    "ORIGIN_CLIENT",
    "ORIGIN_COORDINATOR",
    "ORIGIN_REPLICATION",
    "AppendResult",
    "FileBudget",
    "FileSlice",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ReadResult",
    "SegmentFile",
    "StorageError",
]
