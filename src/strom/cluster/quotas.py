"""Client quotas as the metadata image keeps them: Kafka's entities and keys.

An entity is a tuple of (type, name) pairs sorted by type, a name of None being the default
entity of that type (Kafka's ``<default>``): ``(("user", "alice"),)``,
``(("client-id", None), ("user", "alice"))`` (alice's default client id),
``(("client-id", "app"),)``. ``MetadataImage.client_quotas`` maps each entity with quotas to
its keys and values.
"""

from __future__ import annotations

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (CLIENT_ID, IP, USER)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"  # ip entities only
CLIENT_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE,
               CONTROLLER_MUTATION_RATE)

QuotaEntity = tuple[tuple[str, str | None], ...]


def entity(*, user: str | bool | None = False, client_id: str | bool | None = False) -> QuotaEntity:
    """An entity from its parts: a name, None for the default, False for "not part of it"."""
    parts: list[tuple[str, str | None]] = []
    if client_id is not False:
        parts.append((CLIENT_ID, client_id if isinstance(client_id, str) else None))
    if user is not False:
        parts.append((USER, user if isinstance(user, str) else None))
    return tuple(parts)


def quota_entity_of(pairs: list[list[str | None]] | list[tuple[str, str | None]]) -> QuotaEntity:
    """The entity of a record's or snapshot's list of [type, name] pairs (JSON has no tuples),
    in the image's canonical order (sorted by type)."""
    return tuple(sorted(((str(t), None if n is None else str(n)) for t, n in pairs),
                        key=lambda part: part[0]))
