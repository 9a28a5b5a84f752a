"""Regular expressions from clients, matched in linear time.

Consumer groups subscribe by regex (KIP-848's SubscribedTopicRegex) and ListTransactions filters
by one. Python's ``re`` backtracks: a pattern like ``(a+)+$`` against a topic of 26 a's and a b
took 4 s, and any client can send one. Kafka uses RE2/J for the same reason; this is RE2.
RE2 has no backreferences or lookaround, which Kafka's RE2/J lacks too.
"""

from __future__ import annotations

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a bad pattern is the client's error, answered, not logged by RE2


class RegexError(ValueError):
    """The pattern is not a valid (RE2) regular expression; the message says why."""


def compile_regex(pattern: str) -> re2._Regexp:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        message = exc.args[0] if exc.args else str(exc)
        if isinstance(message, bytes):
            message = message.decode(errors="replace")
        raise RegexError(message) from None
