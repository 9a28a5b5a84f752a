"""Fuzzing the request decoders: frames from real clients, mutated, and random bytes.

For every API key and version the router advertises, the frame decoder (header, route, body
codec, as `Router.dispatch` runs them) must return a value or raise ProtocolError, quickly and
without allocating in proportion to a declared count; record batches (the produce path's records
decoders) may raise only CorruptRecordError. `make test` runs a fixed derandomized sample;
`make fuzz FUZZ_SECONDS=600` keeps drawing random examples for that long.
"""

from __future__ import annotations

import contextlib
import signal
import struct
import time
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fuzz.frames import (
    CORPUS,
    KINDS,
    RAW_DECODERS,
    captured,
    decode_frame,
    fuzz_seconds,
    mutate,
    routes,
    seeds_for,
)

from strom import record as R
from strom.protocol.errors import ProtocolError
from strom.protocol.header import decode_request_header, encode_request_header
from strom.protocol.produce import decode_produce_request
from strom.record.columns import decode_columns

# CPU seconds, not wall time (a loaded CI machine stalls a worker for longer than that): a decode
# of a frame this small takes microseconds (a codec's first use compiles it: milliseconds); a
# runaway loop burns CPU until the bound
MAX_DECODE_SECONDS = 1.0
MAX_PEAK_BYTES = 4 << 20
SUITE_EXAMPLES = 120  # per API key in `make test` (about 10 s in all on a 2-core machine)
IN_PROCESS_SHARE = 0.7  # of FUZZ_SECONDS; the socket fuzzer gets the rest

API_KEYS = sorted(routes())
LONG_TESTS = 2 * len(API_KEYS) + 2  # the tests that share FUZZ_SECONDS in a long run
mutations = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, 1 << 16), st.integers(0, 1 << 16)),
    min_size=1, max_size=5,
)  # fmt: skip


def _settings(examples: int) -> settings:
    long_run = fuzz_seconds() is not None
    return settings(
        max_examples=examples,  # per call; a long run calls again until its time is up
        derandomize=not long_run,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _run(check: Callable[[], None], tests_sharing: int = LONG_TESTS) -> None:
    """Run a @given check once (suite) or again and again until its share of FUZZ_SECONDS."""
    budget = fuzz_seconds()
    if budget is None:
        check()
        return
    deadline = time.monotonic() + budget * IN_PROCESS_SHARE / tests_sharing
    while time.monotonic() < deadline:
        check()


class _Hang(Exception):
    pass


def _alarm(_signum: int, _frame: object) -> None:
    raise _Hang()


def _decode_checked(decode: Callable[[bytes], object], data: bytes,
                    allowed: tuple[type[Exception], ...]) -> None:
    """Decode; fail on any other exception, or after MAX_DECODE_SECONDS of CPU (an alarm on
    the process's CPU time interrupts a runaway loop, so a hang is reported with its input
    instead of stalling the suite)."""
    previous = signal.signal(signal.SIGVTALRM, _alarm)
    signal.setitimer(signal.ITIMER_VIRTUAL, 2 * MAX_DECODE_SECONDS)
    start = time.process_time()
    try:
        decode(data)
    except allowed:
        pass
    except _Hang:
        raise AssertionError(f"decoding hung on {data.hex()}") from None
    except Exception as e:
        raise AssertionError(f"{type(e).__name__} from {data.hex()}") from e
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)
    took = time.process_time() - start
    assert took < MAX_DECODE_SECONDS, \
        f"{took:.3f} CPU-s to decode {len(data)} bytes: {data.hex()}"


# --------------------------------------------------------------------------- the corpus


def test_corpus_is_real_small_and_decodes():
    seeds = captured()
    assert {s.name.rsplit("-", 2)[-2] for s in seeds} == {"confluent", "kafkapython", "aiokafka"}
    assert sum(len(s.frame) for s in seeds) < 300_000
    for s in seeds:
        decode_frame(s.frame)  # real client requests are not malformed
    assert all(p.stat().st_size > 8 for p in CORPUS.glob("*.bin"))


def test_every_advertised_version_has_seeds():
    for api_key, (lo, hi, _) in routes().items():
        versions = {s.version for s in seeds_for(api_key)}
        assert versions == set(range(lo, hi + 1)), api_key
        for s in seeds_for(api_key):
            decode_frame(s.frame)


def test_every_raw_route_has_a_hand_tuned_decoder_here():
    raw = {k for k, (_, _, is_raw) in routes().items() if is_raw}
    assert raw == set(RAW_DECODERS)


# --------------------------------------------------------------------------- mutated frames


def _warm(api_key: int) -> None:
    """Compile the decoders of every version of the API before anything is timed: the time
    limit guards against runaway decoding, and a first decode also compiles its codec (about
    10 ms, much more on a loaded machine)."""
    lo, hi, _ = routes()[api_key]
    for version in range(lo, hi + 1):
        with contextlib.suppress(ProtocolError):
            decode_frame(encode_request_header(api_key, version, 1, None))


@pytest.mark.parametrize("api_key", API_KEYS)
def test_mutated_client_frames(api_key: int):
    seeds = seeds_for(api_key)
    _warm(api_key)

    @_settings(SUITE_EXAMPLES)
    @given(st.sampled_from(seeds), mutations)
    def check(seed, muts):
        _decode_checked(decode_frame, mutate(seed.frame, muts), (ProtocolError,))

    _run(check)


@pytest.mark.parametrize("api_key", API_KEYS)
def test_random_bodies(api_key: int):
    lo, hi, _ = routes()[api_key]
    _warm(api_key)

    @_settings(SUITE_EXAMPLES // 4)
    @given(st.integers(lo, hi), st.booleans(), st.binary(max_size=200))
    def check(version, client_id, body):
        header = encode_request_header(api_key, version, 1, "fuzz" if client_id else None)
        _decode_checked(decode_frame, header + body, (ProtocolError,))

    _run(check)


def test_random_frames():
    @_settings(2000)
    @given(st.binary(max_size=64))
    def check(frame):
        _decode_checked(decode_frame, frame, (ProtocolError,))
        _decode_checked(lambda f: decode_request_header(f, 0), frame, (ProtocolError,))

    _run(check)


# --------------------------------------------------------------------------- declared counts


def _huge_count_variants(frame: bytes, body_start: int):
    """The frame with 2^31-ish counts written over, or inserted at, each of the first 40 body
    positions: a length field read there declares far more elements than there are bytes."""
    end = min(len(frame), body_start + 40)
    for pos in range(body_start, end):
        for value in (0x7FFFFFFF, -0x80000000):
            yield frame[:pos] + struct.pack(">i", value) + frame[pos + 4 :]
        for raw in (b"\xff\xff\xff\xff\x07", b"\x80\x80\x80\x80\x08"):
            yield frame[:pos] + raw + frame[pos:]
            yield frame[:pos] + raw + frame[pos + len(raw) :]


def test_huge_declared_counts_fail_fast_without_allocating():
    seeds = [s for k in API_KEYS for s in seeds_for(k) if s.name.startswith("defaults")
             or s.name.endswith(".bin")]
    tracemalloc.start()
    try:
        for s in seeds:
            _, body_start = decode_request_header(memoryview(s.frame), 0)
            for frame in _huge_count_variants(s.frame, body_start):
                tracemalloc.reset_peak()
                base = tracemalloc.get_traced_memory()[0]
                _decode_checked(decode_frame, frame, (ProtocolError,))
                peak = tracemalloc.get_traced_memory()[1] - base
                assert peak < MAX_PEAK_BYTES, f"{peak} bytes to decode {s.name}: {frame.hex()}"
    finally:
        tracemalloc.stop()


def test_forty_byte_frame_declaring_2_pow_31_topics():
    frame = encode_request_header(3, 4, 1, "x") + struct.pack(">i", 0x7FFFFFFF) + bytes(20)
    assert len(frame) < 45
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError):
            decode_frame(frame)
        assert tracemalloc.get_traced_memory()[1] < MAX_PEAK_BYTES
    finally:
        tracemalloc.stop()


# --------------------------------------------------------------------------- record batches


def _produce_batches() -> list[bytes]:
    out = []
    for s in captured():
        if s.api_key != 0:
            continue
        _, pos = decode_request_header(memoryview(s.frame), 0)
        request = decode_produce_request(memoryview(s.frame)[pos:], s.version)
        out += [bytes(p.records) for t in request.topics for p in t.partitions if p.records]
    return out


def _decode_batches(data: bytes) -> None:
    """What the broker runs on produced batches (framing, key check, full decode), then what
    the Spark source's native reader runs on fetched ones (the C column decoder)."""
    for pos, h in R.iter_batches(data):
        batch = data[pos : pos + h.size]
        R.records_have_keys(batch)
        R.decode_records(batch)
    first = R.read_header(data, 0) if len(data) >= R.RECORD_BATCH_OVERHEAD else None
    aborted = [(first.producer_id, 0)] if first is not None else None  # skipping paths too
    decode_columns(data, 0, 1 << 62, headers=True, aborted=aborted)


def test_mutated_record_batches():
    batches = _produce_batches()
    assert {R.read_header(b, 0).compression for b in batches} == {0, 1, 2, 3, 4}

    @_settings(600)
    @given(st.sampled_from(batches), mutations)
    def check(batch, muts):
        _decode_checked(_decode_batches, mutate(batch, muts, keep_header=0),
                        (R.CorruptRecordError,))

    _run(check)


def test_negative_record_length_cannot_loop_on_a_huge_record_count():
    """records_have_keys stepped back by a negative record length and walked the same bytes
    records_count times: 2^31 - 1 records on 5 bytes hung the broker's event loop."""
    batch = bytearray(R.build_batch([R.Record(key=b"k", value=b"v")], base_offset=0))
    batch[R.RECORDS_OFFSET :] = bytes([0x01, 0, 0, 0, 0x02])  # length -1, key length 1
    struct.pack_into(">i", batch, R.LENGTH_OFFSET, len(batch) - R.LOG_OVERHEAD)
    struct.pack_into(">i", batch, R.RECORDS_COUNT_OFFSET, 2_000_000)
    start = time.process_time()
    with pytest.raises(R.CorruptRecordError):
        R.records_have_keys(bytes(batch))
    assert time.process_time() - start < MAX_DECODE_SECONDS
