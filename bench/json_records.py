"""1 KiB JSON records for the ``iceberg-1k`` scenario (issue 33).

The same events as bench/avro_records.py (the fields of ``bench/schemas/event10.avsc``), each
written as one compact JSON object (``separators=(",", ":")``, no spaces around them) whose
``body`` string is sized so that the whole value is exactly ``size`` bytes. The ``body``
characters are ASCII letters and spaces, which JSON writes as they are, so one character is
one byte. A client job builds a pool of them before it is told to start and cycles through it,
as it does with the Avro records, so no client-side encoding is measured.
"""

from __future__ import annotations

import json
import random
import string
from typing import Any

from bench import avro_records

POOL = avro_records.POOL
SEPARATORS = (",", ":")
_WORDS = string.ascii_lowercase + "      "  # ASCII only: JSON keeps them as they are


def encode(datum: dict[str, Any]) -> bytes:
    return json.dumps(datum, separators=SEPARATORS).encode()


def values(count: int = POOL, size: int = 1024, seed: int = 33) -> list[bytes]:
    """``count`` distinct JSON values of exactly ``size`` bytes (the same ones for the same
    arguments)."""
    rng = random.Random(seed)
    out = []
    for seq in range(count):
        datum = avro_records.datum(rng, seq)
        room = size - len(encode(datum))  # the empty body's two quotes are counted already
        if room < 0:
            raise ValueError(f"a {size}-byte JSON value cannot hold event {seq} "
                             f"({size - room} bytes without its body)")
        datum["body"] = "".join(rng.choices(_WORDS, k=room))
        out.append(encode(datum))
    return out
