"""Type aliases for the bytes-like objects that the codecs read and patch in place."""

from __future__ import annotations

from typing import TypeAlias

Buf: TypeAlias = bytes | bytearray | memoryview
"""A flat bytes-like object a reader can index, slice and measure."""

WritableBuf: TypeAlias = bytearray | memoryview
"""A bytes-like object patched in place (a batch's offset, epoch, timestamps, CRC)."""
