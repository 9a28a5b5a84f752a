"""Seeds, mutations and the in-process frame decoder shared by the fuzz tests.

`decode_frame` follows `Router.dispatch` up to the handler call: header, route, body decoder
(the hand-tuned codecs for the raw routes, the schema codec for the others). The seeds for each
advertised (api key, version) are the captured client frames plus, for versions no client sent,
captured bodies re-encoded at that version and an all-defaults body.

Budget: without ``FUZZ_SECONDS`` the fuzz tests run a fixed, derandomized number of examples
(``make test``); with it (``make fuzz FUZZ_SECONDS=600``) they draw fresh random examples until
their share of that time is spent.
"""

from __future__ import annotations

import os
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from strom.broker.handlers import MODULES
from strom.broker.handlers.produce import FIRST_SUPPORTED as PRODUCE_FIRST_SUPPORTED
from strom.broker.router import Router
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec
from strom.protocol.errors import ProtocolError
from strom.protocol.fetch import decode_fetch_request
from strom.protocol.header import decode_request_header, encode_request_header, peek_header
from strom.protocol.metadata import decode_metadata_request
from strom.protocol.produce import decode_produce_request

CORPUS = Path(__file__).resolve().parent / "corpus"

# The hand-tuned decoders of the raw routes; a new raw route must be added here.
RAW_DECODERS: dict[int, Callable[[memoryview, int], object]] = {
    ApiKey.PRODUCE: decode_produce_request,
    ApiKey.FETCH: decode_fetch_request,
    ApiKey.METADATA: decode_metadata_request,
    ApiKey.API_VERSIONS: lambda body, v: request_codec(ApiKey.API_VERSIONS, v).decode(body),
}


def fuzz_seconds() -> float | None:
    """The long-run budget of ``make fuzz``, or None for the suite's fixed short run."""
    value = os.environ.get("FUZZ_SECONDS", "").strip()
    return float(value) if value else None


@dataclass(frozen=True)
class Seed:
    name: str
    api_key: int
    version: int
    frame: bytes  # request header + body, without the 4-byte size prefix


@cache
def routes() -> dict[int, tuple[int, int, bool]]:
    """api key -> (min version, max version, raw) as the broker's router advertises them."""
    router = Router(None, MODULES)  # type: ignore[arg-type]  (routing needs no broker)
    out = {k: (r.spec.min_version, r.spec.max_version, r.spec.raw) for k, r in router.routes.items()}
    # Produce v0-2 are advertised (as Kafka 4.4 does) but close the connection undecoded
    lo, hi, raw = out[ApiKey.PRODUCE]
    out[ApiKey.PRODUCE] = (max(lo, PRODUCE_FIRST_SUPPORTED), hi, raw)
    return out


@cache
def captured() -> tuple[Seed, ...]:
    seeds = []
    for path in sorted(CORPUS.glob("*.bin")):
        frame = path.read_bytes()
        api_key, version, _ = peek_header(frame)
        seeds.append(Seed(path.name, api_key, version, frame))
    return tuple(seeds)


def decode_frame(frame: bytes | bytearray) -> object:
    """Decode a request frame as the broker does before calling a handler.

    Raises ProtocolError for malformed input (the broker closes the connection).
    """
    if len(frame) < 8:
        raise ProtocolError("request shorter than its header")
    api_key, version, _ = peek_header(frame)
    route = routes().get(api_key)
    if route is None or not route[0] <= version <= route[1]:
        raise ProtocolError(f"unsupported api key {api_key} version {version}")
    header_version = request_codec(api_key, version).header_version
    _, pos = decode_request_header(memoryview(frame), 0, header_version)
    body = memoryview(frame)[pos:]
    if route[2]:
        return RAW_DECODERS[api_key](body, version)
    return request_codec(api_key, version).decode(body)[0]


def _with_header(api_key: int, version: int, body: bytes) -> bytes:
    return encode_request_header(api_key, version, 7, "fuzz-seed") + body


@cache
def seeds_for(api_key: int) -> tuple[Seed, ...]:
    """Seeds of every advertised version of api_key (captured first, then synthesized)."""
    lo, hi, _ = routes()[api_key]
    own = [s for s in captured() if s.api_key == api_key and lo <= s.version <= hi]
    out = list(own)
    for version in range(lo, hi + 1):
        codec = request_codec(api_key, version)
        out.append(Seed(f"defaults-v{version}", api_key, version,
                        _with_header(api_key, version, codec.encode({}))))
        for s in own:
            if s.version == version:
                continue
            src = request_codec(api_key, s.version)
            _, pos = decode_request_header(memoryview(s.frame), 0, src.header_version)
            try:
                value = src.decode(memoryview(s.frame)[pos:])[0]
                body = codec.encode(value)
            except ProtocolError:  # a field the other version cannot carry
                continue
            out.append(Seed(f"{s.name}->v{version}", api_key, version,
                            _with_header(api_key, version, body)))
    return tuple(out)


# --------------------------------------------------------------------------- mutations
# Each mutation is (kind, position, value); positions wrap around the frame, so any int works.

INTERESTING_I32 = (0, 1, -1, -2, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF,
                   0x7FFFFFFF, -0x80000000, 0x40000000)
INTERESTING_I16 = (0, 1, -1, -2, 0x7F, 0xFF, 0x7FFF, -0x8000)
INTERESTING_VARINTS = (
    b"\x00", b"\x01", b"\x7f", b"\x80\x01", b"\xff\xff\xff\xff\x07",  # 2^31 - 1
    b"\xff\xff\xff\xff\x0f",  # 2^32 - 1
    b"\x80\x80\x80\x80\x08",  # 2^31
    b"\xff\xff\xff\xff\xff\x01",  # too long for a varint
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # too long for a varlong
    b"\x80",  # truncated
)
KINDS = ("flip", "byte", "i16", "i32", "varint", "truncate", "delete", "insert", "dup")


def mutate(frame: bytes, mutations: list[tuple[str, int, int]], *, keep_header: int = 4) -> bytes:
    """Apply the mutations in order. The first `keep_header` bytes (api key and version) stay,
    so the frame still reaches the decoder it was meant for; the rest is fair game."""
    buf = bytearray(frame)
    for kind, position, value in mutations:
        span = len(buf) - keep_header
        if span <= 0:
            if kind == "insert":
                buf += bytes([value & 0xFF]) * (1 + value % 7)
            continue
        pos = keep_header + position % span
        if kind == "flip":
            buf[pos] ^= 1 << (value % 8)
        elif kind == "byte":
            buf[pos] = value & 0xFF
        elif kind == "i16":
            buf[pos : pos + 2] = struct.pack(">h", INTERESTING_I16[value % len(INTERESTING_I16)])
        elif kind == "i32":
            buf[pos : pos + 4] = struct.pack(">i", INTERESTING_I32[value % len(INTERESTING_I32)])
        elif kind == "varint":
            raw = INTERESTING_VARINTS[value % len(INTERESTING_VARINTS)]
            buf[pos : pos + (value >> 4) % 3] = raw  # replace 0, 1 or 2 bytes
        elif kind == "truncate":
            del buf[pos:]
        elif kind == "delete":
            del buf[pos : pos + 1 + value % 16]
        elif kind == "insert":
            buf[pos:pos] = bytes([value & 0xFF]) * (1 + value % 7)
        elif kind == "dup":
            buf[pos:pos] = buf[pos : pos + 1 + value % 32]
    return bytes(buf)


def random_mutations(rng: random.Random, max_count: int = 4) -> list[tuple[str, int, int]]:
    """Mutations for the socket fuzzer (the in-process fuzzer draws them with hypothesis)."""
    return [(rng.choice(KINDS), rng.randrange(1 << 16), rng.randrange(1 << 16))
            for _ in range(rng.randint(1, max_count))]
