"""Client regexes compile with RE2: linear-time matching, clear errors."""

from __future__ import annotations

import pytest

from strom.common.regex import RegexError, compile_regex


def test_matches_like_re_for_plain_patterns() -> None:
    pattern = compile_regex(r"orders-(eu|us)-\d+")
    assert pattern.fullmatch("orders-eu-12") is not None
    assert pattern.fullmatch("orders-asia-1") is None


@pytest.mark.parametrize("bad", ["(unclosed", r"(a)\1", "(?=lookahead)"])
def test_invalid_or_backtracking_only_syntax_is_a_regex_error(bad: str) -> None:
    with pytest.raises(RegexError):
        compile_regex(bad)


def test_a_pathological_pattern_does_not_backtrack() -> None:
    assert compile_regex("(a+)+$").fullmatch("a" * 5000 + "b") is None
