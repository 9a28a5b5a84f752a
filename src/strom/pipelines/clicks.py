"""A synthetic website clickstream: the input of the derived-feed pipeline.

Events are JSON objects, one per record, keyed by organisation (so one organisation's events
keep their order in one partition)::

    {"ts": "2026-11-22T06:45:12.345Z", "org_id": "org-003", "user_id": "user-00042",
     "session_id": "s-5f1c", "url": "https://org-003.example.com/pricing",
     "referrer": "https://search.example/", "user_agent": "Mozilla/5.0 (X11; Linux x86_64)"}

A small share of events is deliberately broken (malformed JSON, no organisation, bad time or
URL) so that the dead-letter path is exercised. Generation is deterministic for a seed, and
:func:`expected_counts` computes the pipeline's answers for a list of events, which is what the
tests compare against.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

PAGES = ("/", "/pricing", "/docs", "/blog", "/signup", "/login", "/dashboard", "/settings")
REFERRERS = (None, "https://search.example/", "https://social.example/", "https://news.example/")
AGENTS = ("Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh)", "curl/8.5")
INVALID_KINDS = ("malformed-json", "missing-org", "bad-ts", "bad-url")
MINUTE_MS = 60_000
DAY_MS = 86_400_000


@dataclass(frozen=True)
class Event:
    """One generated click; ``valid`` says whether the pipeline must accept it."""

    key: bytes
    value: bytes
    ts_ms: int
    org_id: str | None
    valid: bool


def iso_ms(ms: int) -> str:
    """``2026-11-22T06:45:12.345Z`` for epoch milliseconds."""
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def org_name(i: int) -> str:
    return f"org-{i:03d}"


def generate_events(count: int, *, orgs: int = 10, seed: int = 0, start_ms: int | None = None,
                    spacing_ms: int = 50, invalid_ratio: float = 0.01,
                    users_per_org: int = 100) -> Iterator[Event]:
    """``count`` events starting at ``start_ms`` (default: now), ``spacing_ms`` apart."""
    if orgs < 1:
        raise ValueError("orgs must be at least 1")
    rnd = random.Random(seed)
    if start_ms is None:
        start_ms = int(datetime.now(tz=UTC).timestamp() * 1000)
    for i in range(count):
        ts = start_ms + i * spacing_ms
        org = org_name(rnd.randrange(orgs))
        user = f"user-{rnd.randrange(users_per_org):05d}"
        body: dict[str, object] = {
            "ts": iso_ms(ts),
            "org_id": org,
            "user_id": user,
            "session_id": f"s-{rnd.getrandbits(32):08x}",
            "url": f"https://{org}.example.com{rnd.choice(PAGES)}",
            "referrer": rnd.choice(REFERRERS),
            "user_agent": rnd.choice(AGENTS),
        }
        if invalid_ratio > 0 and rnd.random() < invalid_ratio:
            kind = rnd.choice(INVALID_KINDS)
            if kind == "malformed-json":
                value = json.dumps(body).encode()[:-7]  # cut off: not JSON any more
            else:
                if kind == "missing-org":
                    del body["org_id"]
                elif kind == "bad-ts":
                    body["ts"] = "yesterday at noon"
                else:
                    body["url"] = "not a url"
                value = json.dumps(body).encode()
            yield Event(org.encode(), value, ts, org, valid=False)
            continue
        yield Event(org.encode(), json.dumps(body).encode(), ts, org, valid=True)


def window_start(ts_ms: int, size_ms: int) -> int:
    return ts_ms - ts_ms % size_ms


def expected_counts(events: Iterable[Event]) -> dict[tuple[str, str, int], int]:
    """``{(granularity, org_id, window_start_ms): visits}`` for the valid events, with
    granularity "minute" (1-minute windows) and "day" (UTC days)."""
    counts: Counter[tuple[str, str, int]] = Counter()
    for e in events:
        if not e.valid or e.org_id is None:
            continue
        counts[("minute", e.org_id, window_start(e.ts_ms, MINUTE_MS))] += 1
        counts[("day", e.org_id, window_start(e.ts_ms, DAY_MS))] += 1
    return dict(counts)
