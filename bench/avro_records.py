"""The Avro records of the schema-validation scenario (``produce-1k-avro``, issue 31).

Every record is a value as Confluent's serializers frame it: magic byte 0, the schema's id in
4 bytes (big-endian), then the Avro binary encoding of one datum of the fixed 10-field schema
``bench/schemas/event10.avsc``. Its ``body`` string is sized so that each framed value is exactly
``size`` bytes. The client job serializes a pool of them once, before it is told to start, and
produces the pool over and over, so no client-side encoding is measured.
"""

from __future__ import annotations

import io
import json
import random
import string
from pathlib import Path
from typing import Any

import fastavro

SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "event10.avsc"
MAGIC = 0
HEADER_BYTES = 5  # magic byte and 4-byte schema id
POOL = 1024  # distinct records a producer cycles through
KINDS = ("VIEW", "CLICK", "CART", "BUY", "LEAVE")
_WORDS = string.ascii_lowercase + "      "  # ASCII only: a character is a byte


def schema_text() -> str:
    """The schema as registered (the file's text)."""
    return SCHEMA_PATH.read_text()


def parsed_schema() -> Any:
    return fastavro.parse_schema(json.loads(schema_text()))


def frame(schema_id: int, body: bytes) -> bytes:
    """A value in Confluent's wire format: magic byte 0, the 4-byte id, the Avro body."""
    if not 0 <= schema_id < 1 << 31:
        raise ValueError(f"schema id {schema_id} out of range")
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + body


def encode(schema: Any, datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, datum)
    return out.getvalue()


def _varint_len(n: int) -> int:
    """Bytes of Avro's zig-zag varint for a non-negative ``n`` (a string's length)."""
    z, length = n << 1, 1
    while z >= 0x80:
        z >>= 7
        length += 1
    return length


def body_length(rest: int, room: int) -> int:
    """Characters of the ``body`` string so that the datum's encoding is ``room`` bytes, given
    ``rest`` bytes for every other field (the string's own length prefix is counted here)."""
    want = room - rest
    for prefix in (1, 2, 3):
        n = want - prefix
        if n >= 0 and _varint_len(n) == prefix:
            return n
    raise ValueError(f"no body length makes {room} bytes from {rest} bytes of other fields")


def datum(rng: random.Random, seq: int, body: str = "") -> dict[str, Any]:
    """One event: realistic field values, all but ``body`` small."""
    return {
        "id": seq,
        "timestamp": 1_767_225_600_000 + seq * 37 + rng.randrange(1000),
        "user": f"user-{rng.randrange(1_000_000):06d}",
        "kind": rng.choice(KINDS),
        "amount": round(rng.uniform(0, 500), 2),
        "quantity": rng.randrange(1, 20),
        "accepted": rng.random() < 0.9,
        "referrer": None if rng.random() < 0.3 else f"https://example.org/p/{rng.randrange(10**6)}",
        "tags": [f"tag{rng.randrange(100)}" for _ in range(rng.randrange(0, 6))],
        "body": body,
    }


def records(count: int, size: int = 1024, seed: int = 31) -> list[dict[str, Any]]:
    """``count`` distinct data whose framed encoding is exactly ``size`` bytes each (the same
    ones for the same arguments)."""
    schema = parsed_schema()
    rng = random.Random(seed)
    out = []
    for seq in range(count):
        d = datum(rng, seq)
        rest = len(encode(schema, d)) - 1  # the empty body is one byte: its length prefix
        n = body_length(rest, size - HEADER_BYTES)
        d["body"] = "".join(rng.choices(_WORDS, k=n))
        out.append(d)
    return out


def values(schema_id: int, count: int = POOL, size: int = 1024, seed: int = 31) -> list[bytes]:
    """``count`` framed values of ``size`` bytes, ready to produce."""
    schema = parsed_schema()
    out = [frame(schema_id, encode(schema, d)) for d in records(count, size, seed)]
    wrong = [len(v) for v in out if len(v) != size]
    if wrong:
        raise ValueError(f"records of {wrong[0]} bytes, expected {size}")
    return out
