"""Version-exact error codes: the code a request of a given version may be answered with.

A client only knows the error codes that existed when its request version was defined; a newer
code reaches it as an unknown (fatal) error. Kafka therefore answers older versions with the
older code in a few places (KafkaApis, ReplicaManager, AddPartitionsToTxnManager, the
coordinators); this module holds those rules in one table, so every handler answers alike:

- PRODUCER_FENCED (KIP-588) is INVALID_PRODUCER_EPOCH for InitProducerId v0-3, and for
  AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v0-1;
- TRANSACTION_ABORTABLE (KIP-890) is INVALID_TXN_STATE for Produce v0-10 and TxnOffsetCommit
  v0-3;
- KAFKA_STORAGE_ERROR is NOT_LEADER_OR_FOLLOWER for Fetch v0-5 (the client then refreshes its
  metadata and retries instead of failing);
- OFFSET_NOT_AVAILABLE is LEADER_NOT_AVAILABLE for ListOffsets v0-4;
- TOPIC_DELETION_DISABLED is INVALID_REQUEST for DeleteTopics v0-2.

`for_version` maps one code; `downgrade_errors` rewrites every error code field (``error_code``,
``partition_error_code``) of a response mapping (copying what it changes). The router applies the latter to generic handlers' replies (only for the APIs
and versions listed here: a dict lookup per request otherwise); raw handlers (Produce, Fetch)
call `for_version` themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode

__all__ = ["RULES", "downgrade_errors", "first_exact_version", "for_version", "needs_downgrade"]

# api_key -> {newer code: (first version that may receive it, code sent to older versions)}
RULES: dict[int, dict[int, tuple[int, int]]] = {
    ApiKey.PRODUCE: {ErrorCode.TRANSACTION_ABORTABLE: (11, ErrorCode.INVALID_TXN_STATE)},
    ApiKey.FETCH: {ErrorCode.KAFKA_STORAGE_ERROR: (6, ErrorCode.NOT_LEADER_OR_FOLLOWER)},
    ApiKey.LIST_OFFSETS: {ErrorCode.OFFSET_NOT_AVAILABLE: (5, ErrorCode.LEADER_NOT_AVAILABLE)},
    ApiKey.INIT_PRODUCER_ID: {ErrorCode.PRODUCER_FENCED: (4, ErrorCode.INVALID_PRODUCER_EPOCH)},
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        ErrorCode.PRODUCER_FENCED: (2, ErrorCode.INVALID_PRODUCER_EPOCH)},
    ApiKey.ADD_OFFSETS_TO_TXN: {ErrorCode.PRODUCER_FENCED: (2, ErrorCode.INVALID_PRODUCER_EPOCH)},
    ApiKey.END_TXN: {ErrorCode.PRODUCER_FENCED: (2, ErrorCode.INVALID_PRODUCER_EPOCH)},
    ApiKey.TXN_OFFSET_COMMIT: {ErrorCode.TRANSACTION_ABORTABLE: (4, ErrorCode.INVALID_TXN_STATE)},
    ApiKey.DELETE_TOPICS: {ErrorCode.TOPIC_DELETION_DISABLED: (3, ErrorCode.INVALID_REQUEST)},
}

# api_key -> the first version that needs no rewriting (every rule's version, at most)
_EXACT_FROM: dict[int, int] = {
    key: max(first for first, _ in rules.values()) for key, rules in RULES.items()}


def first_exact_version(api_key: int) -> int:
    """The lowest version of ``api_key`` that may receive every code unchanged."""
    return _EXACT_FROM.get(api_key, 0)


def needs_downgrade(api_key: int, version: int) -> bool:
    """Whether some code must be rewritten for this request version (cheap: one lookup)."""
    return version < _EXACT_FROM.get(api_key, 0)


def for_version(api_key: int, version: int, code: int) -> int:
    """The code a request of ``api_key``/``version`` is answered with instead of ``code``."""
    rule = RULES.get(api_key)
    if rule is None:
        return code
    entry = rule.get(code)
    if entry is None or version >= entry[0]:
        return code
    return int(entry[1])


def downgrade_errors(api_key: int, version: int, response: Any) -> Any:
    """``response`` with every ``*error_code`` field (nested mappings, Structs and lists
    included, as handlers build them) that this version may not receive rewritten. Copy on
    write: what changes is copied, so a reply a coordinator keeps (e.g. for a retry) is never
    altered for the next, newer client."""
    rules = RULES.get(api_key)
    if rules and version < _EXACT_FROM[api_key]:
        mapping = {code: new for code, (first, new) in rules.items() if version < first}
        return _rewrite(response, mapping)
    return response


def _rewrite(value: Any, mapping: dict[int, int]) -> Any:
    if isinstance(value, Mapping):
        changed: dict[Any, Any] = {}
        for key, item in value.items():
            if key.__class__ is str and key.endswith("error_code"):
                if item in mapping:
                    changed[key] = mapping[item]
            elif isinstance(item, _CONTAINERS):
                new = _rewrite(item, mapping)
                if new is not item:
                    changed[key] = new
        return {**value, **changed} if changed else value
    if isinstance(value, (list, tuple)):
        items = [_rewrite(item, mapping) if isinstance(item, _CONTAINERS) else item
                 for item in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, Struct):
        fields = _rewrite(vars(value), mapping)
        return value if fields is vars(value) else Struct(**fields)
    return value


_CONTAINERS = (Mapping, list, tuple, Struct)
