"""Types of the C extension strom.record._columns (see _columns.c and strom.record.columns)."""

from typing_extensions import Buffer

_Binary = tuple[bytes, bytes, bytes | None, int]  # offsets, data, validity, null count
_Headers = tuple[bytes, bytes | None, int, _Binary, _Binary]

def scan(buf: Buffer, /) -> tuple[int, int]: ...
def decode(buf: Buffer, lo: int, hi: int, headers: bool, aborted: Buffer | None = None,
           /) -> tuple[int, bytes, bytes, bytes, _Binary, _Binary, _Headers | None, int,
                       int]: ...
