"""Checking client quota alterations and matching DescribeClientQuotas filters, as Kafka 4.4
does (ClientQuotaControlManager for alterations, ClientQuotasImage.describe for filters): the
same error codes and messages, so kafka-configs prints what it prints against Kafka.

Pure functions over the image's ``client_quotas``; the handlers (broker/handlers/quotas.py)
decode the wire, the controllers store what `plan_alterations` returns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strom.cluster.quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
)
from strom.protocol.errors import ErrorCode, KafkaError

# Kafka's QuotaConfig.userAndClientQuotaConfigs: the byte rates are LONG configs (whole
# numbers), the others DOUBLE
INTEGRAL_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
VALID_KEYS = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE,
                        CONTROLLER_MUTATION_RATE})
LONG_MAX = 2**63 - 1
IP_REFUSED = ("Strom does not enforce connection_creation_rate: quotas of ip entities are not "
              "supported")

# DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

Changes = dict[QuotaEntity, dict[str, float | None]]
Quotas = Mapping[QuotaEntity, Mapping[str, float]]


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.INVALID_REQUEST, message)


def describe_entity(parts: Sequence[tuple[str, str | None]]) -> str:
    """An entity as Kafka's messages show it (ClientQuotaEntity.toString)."""
    inner = ", ".join(f"{t}={n}" for t, n in parts)
    return f"ClientQuotaEntity(entries={{{inner}}})"


# -- AlterClientQuotas --------------------------------------------------------------------------


@dataclass(frozen=True)
class Alteration:
    """One entry of an AlterClientQuotas request: the entity as sent (pairs in request order),
    and (key, value) ops, value None for a removal."""

    parts: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class Outcome:
    """The answer for one entity of a request (ErrorCode.NONE when it is altered)."""

    parts: tuple[tuple[str, str | None], ...]
    error_code: int
    error_message: str | None


def check_entity(parts: Mapping[str, str | None]) -> QuotaEntity:
    """The canonical entity, or KafkaError INVALID_REQUEST as ClientQuotaControlManager
    answers (validateEntity, configKeysForEntityType); ip entities are refused here: Strom
    enforces no connection_creation_rate, and accepting a quota it ignores would be a lie."""
    if not parts:
        raise _invalid("Invalid empty client quota entity")
    for entity_type, name in parts.items():
        if entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
    if IP in parts:
        if len(parts) > 1:
            raise _invalid("Invalid quota entity combination, IP entity shouldnot be combined "
                           "with User or ClientId")
        raise _invalid(IP_REFUSED)
    return tuple(sorted(parts.items()))


def check_value(key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue: a known key, a finite positive value, whole for LONG
    keys (in this order, with these messages: checked against Kafka 4.4)."""
    if key not in VALID_KEYS:
        raise _invalid(f"Invalid configuration key {key}")
    if not math.isfinite(value):
        raise _invalid(f"Quota {key} must be a finite number")
    if value <= 0.0:
        raise _invalid(f"Quota {key} must be greater than 0")
    if key in INTEGRAL_KEYS:
        if value > LONG_MAX:
            raise _invalid(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise _invalid(f"{key} cannot be a fractional value.")


def plan_alterations(current: Quotas, alterations: Sequence[Alteration]
                     ) -> tuple[list[Outcome], Changes]:
    """The outcome per distinct entity (in request order) and the changes to store: only keys
    whose value changes, and removals of keys the entity has.

    As Kafka, an entity is a map: a type named twice keeps its last name. An entity named
    twice, or with a key twice, is answered "Ignoring duplicate entity"; Kafka still applies
    the first of two equal entities, Strom applies neither (the answer says it failed)."""
    outcomes: dict[tuple[tuple[str, str | None], ...], Outcome] = {}
    changes: Changes = {}
    for alt in alterations:
        parts = dict(alt.parts)
        shown = tuple(parts.items())
        ident = tuple(sorted(shown, key=lambda p: p[0]))
        keys = [k for k, _ in alt.ops]
        if ident in outcomes or len(set(keys)) != len(keys):
            outcomes[ident] = Outcome(shown, ErrorCode.INVALID_REQUEST,
                                      f"Ignoring duplicate entity {describe_entity(shown)}")
            changes.pop(ident, None)
            continue
        try:
            entity = check_entity(parts)
            have = current.get(entity, {})
            wanted: dict[str, float | None] = {}
            for key, value in alt.ops:
                if value is None:
                    if key in have:
                        wanted[key] = None
                    continue
                check_value(key, value)
                if have.get(key) != value:
                    wanted[key] = float(value)
        except KafkaError as exc:
            outcomes[ident] = Outcome(shown, exc.code, exc.message)
            continue
        outcomes[ident] = Outcome(shown, ErrorCode.NONE, None)
        if wanted:
            changes[entity] = wanted
    return list(outcomes.values()), changes


# -- DescribeClientQuotas -----------------------------------------------------------------------


@dataclass(frozen=True)
class Filter:
    """A checked DescribeClientQuotas filter: names (None: the default) each entity must have
    for these types, types it must have with any name, and whether it may have others."""

    exact: Mapping[str, str | None]
    specified: frozenset[str]
    strict: bool


def check_filter(components: Sequence[tuple[str, int, str | None]], strict: bool) -> Filter:
    """(entity_type, match_type, match) components checked as ClientQuotasImage.describe
    checks them: INVALID_REQUEST, or UNSUPPORTED_VERSION for an unknown entity type."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise _invalid("Invalid empty entity type.")
        if entity_type in exact or entity_type in specified:
            raise _invalid(f"Entity type {entity_type} cannot appear more than once in the "
                           "filter.")
        if entity_type not in (IP, USER, CLIENT_ID):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to "
                               "null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a "
                               "match string.")
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a "
                               "match string.")
            specified.add(entity_type)
        else:
            raise _invalid(f"Unknown match type {match_type}")
    types = set(exact) | specified
    if IP in types and (USER in types or CLIENT_ID in types):
        raise _invalid("Invalid entity filter component combination. IP filter component "
                       "should not be used with user or clientId filter component.")
    return Filter(exact, frozenset(specified), strict)


def matches(entity: QuotaEntity, f: Filter) -> bool:
    """Kafka's matching: every exact component names the entity's part, every specified type
    is a part; strict, the entity has no other part. A strict empty filter matches nothing."""
    parts = dict(entity)
    if f.strict and (len(parts) != len(f.exact) + len(f.specified) or not parts):
        return False
    for entity_type, name in f.exact.items():
        if entity_type not in parts or parts[entity_type] != name:
            return False
    return all(t in parts for t in f.specified)


def describe(quotas: Quotas, f: Filter) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities the filter matches with their quotas, in a stable order."""
    found = [(e, dict(q)) for e, q in quotas.items() if matches(e, f)]
    return sorted(found, key=lambda item: [(t, n is not None, n or "") for t, n in item[0]])
