"""The one exception for bytes that cannot be a v2 batch or record.

Hierarchy (``except CorruptRecordError`` from here catches every kind of corruption):

- `CorruptRecordError` (a ``ValueError``): raised by this package on malformed batches, records,
  varints or compressed sections. It carries no error code: this package knows nothing of
  requests.
- ``strom.storage.errors.CorruptRecordError`` subclasses it and ``StorageError``: storage raises
  it (or wraps ours in it) so the produce and fetch handlers answer ``CORRUPT_MESSAGE``.
- ``strom.storage.segment.CorruptSegmentError`` subclasses that one: damage at a position of a
  segment file, which recovery truncates.
"""

from __future__ import annotations


class CorruptRecordError(ValueError):
    """Bytes that cannot be a valid v2 batch or record (Kafka's CORRUPT_MESSAGE)."""
