"""The cleaner's key map: MD5 of a key -> the latest offset seen for it, in bounded memory.

Kafka's SkimpyOffsetMap: open addressing over flat arrays, 24 bytes a slot (16 of hash, 8 of
offset), filled to ``load_factor`` at most. When the map is full the cleaner stops building it at a
batch boundary and cleans only up to there; the rest of the dirty log waits for the next pass.
"""

from __future__ import annotations

import hashlib
import struct
from array import array

from strom.record.buffers import Buf

BYTES_PER_ENTRY = 24
_HASH = struct.Struct(">QQ")


def key_hash(key: Buf) -> tuple[int, int]:
    """Two 64-bit halves of the key's MD5; (0, 0) marks an empty slot, so it is never returned."""
    hi, lo = _HASH.unpack(hashlib.md5(key, usedforsecurity=False).digest())
    if not hi and not lo:
        lo = 1
    return hi, lo


class OffsetMap:
    """At most ``memory`` bytes of slots (fewer when ``expected_keys`` says fewer are needed)."""

    __slots__ = ("_hi", "_lo", "_off", "latest_offset", "max_entries", "size", "slots")

    def __init__(self, memory: int, load_factor: float = 0.9, *,
                 expected_keys: int | None = None) -> None:  # fmt: skip
        slots = max(memory // BYTES_PER_ENTRY, 1)
        if expected_keys is not None:
            slots = min(slots, max(int(expected_keys / load_factor) + 1, 16))
        self.slots = slots
        self.max_entries = max(int(slots * load_factor), 1)
        zeros = bytes(8 * slots)
        self._hi = array("Q", zeros)
        self._lo = array("Q", zeros)
        self._off = array("q", zeros)
        self.size = 0
        self.latest_offset = -1  # the map covers the log up to here (inclusive)

    @property
    def memory(self) -> int:
        return self.slots * BYTES_PER_ENTRY

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def put(self, key: Buf, offset: int) -> bool:
        """Map ``key`` to ``offset``; False (nothing stored) when a new key does not fit."""
        hi, lo = key_hash(key)
        his, los, slots = self._hi, self._lo, self.slots
        i = lo % slots
        while True:
            h = his[i]
            if h == hi and los[i] == lo:
                self._off[i] = offset
                return True
            if not h and not los[i]:
                break
            i += 1
            if i == slots:
                i = 0
        if self.size >= self.max_entries:
            return False
        his[i], los[i], self._off[i] = hi, lo, offset
        self.size += 1
        return True

    def get(self, key: Buf) -> int:
        """The offset stored for ``key``, or -1."""
        hi, lo = key_hash(key)
        his, los, slots = self._hi, self._lo, self.slots
        i = lo % slots
        while True:
            h = his[i]
            if h == hi and los[i] == lo:
                return self._off[i]
            if not h and not los[i]:
                return -1
            i += 1
            if i == slots:
                i = 0
