"""Request validation the controller applies before writing metadata records."""

from __future__ import annotations

import re

from strom.protocol.errors import ErrorCode, KafkaError

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def check_topic_name(name: str | None) -> None:
    """Kafka's rules: [a-zA-Z0-9._-], at most 249 characters, not '.' or '..'."""
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: the empty string is not allowed")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: '{name}' is not allowed")
    if len(name) > MAX_TOPIC_NAME:
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is invalid: the length of '{name}' is longer than the max allowed "
            f"length {MAX_TOPIC_NAME}",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is invalid: '{name}' contains one or more characters other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        )


def colliding(name: str, existing: list[str]) -> str | None:
    """Kafka refuses topics whose names differ only by '.' vs '_' (metric names collide)."""
    key = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == key:
            return other
    return None
