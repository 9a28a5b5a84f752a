"""Log compaction (cleanup.policy=compact): the cleaner service and its parts.

``service`` chooses logs and drives passes, ``cleaner`` holds the cleaning rules and the worker
job, ``offset_map`` the bounded key map, ``batches`` the record-level rewriting.
"""

from strom.storage.cleaner.cleaner import CleaningAborted, CleanJob, LogToClean, log_to_clean
from strom.storage.cleaner.offset_map import OffsetMap
from strom.storage.cleaner.service import CLEANER_CHECKPOINT, CleanerConfig, LogCleaner

__all__ = [
    "CLEANER_CHECKPOINT",
    "CleanJob",
    "CleanerConfig",
    "CleaningAborted",
    "LogCleaner",
    "LogToClean",
    "OffsetMap",
    "log_to_clean",
]
