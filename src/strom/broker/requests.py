"""Decoded requests with every field of their API, whatever the version.

The schema codec decodes the fields of one version; a field another version of the API has is
absent (OffsetCommit v2 has no ``group_instance_id``, v10 no ``retention_time``). So that a
handler reads ``request.group_instance_id`` plainly instead of
``getattr(request, "group_instance_id", None)``, the router completes each decoded request: a
field not on the wire in this version gets its schema default, as Kafka's generated request
classes do. Where Kafka's behaviour for an old version is not the default, the handler checks
``ctx.api_version``.

Which fields are absent in which version, and typing Protocols of each request (for the
handlers' signatures and type checkers), are generated from kio's schemas into
`strom.broker.request_types` by `strom.broker.request_types_gen` (a unit test fails when it is
out of date). Nothing is loaded from the schemas at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from strom.broker.request_types import ABSENT, Absent
from strom.protocol.codec import Struct, fresh_default

Filler = Callable[[Struct], None]


def _filler(entries: Iterable[Absent]) -> Filler:
    """A function adding the absent fields at their paths (walking arrays element by element)."""
    top: list[tuple[str, object]] = []
    children: dict[str, list[Absent]] = {}
    for path, name, default in entries:
        if path:
            children.setdefault(path[0], []).append((path[1:], name, default))
        else:
            top.append((name, default))
    subs = [(name, _filler(rest)) for name, rest in children.items()]

    def fill(s: Struct) -> None:
        d = s.__dict__
        for name, default in top:
            d[name] = fresh_default(default)
        for name, sub in subs:
            value = d[name]
            if isinstance(value, list):
                for element in value:
                    sub(element)
            elif value is not None:
                sub(value)

    return fill


FILLERS: dict[tuple[int, int], Filler] = {key: _filler(v) for key, v in ABSENT.items()}


def complete_request(api_key: int, version: int, request: Struct) -> None:
    """Give a decoded request the fields its version lacks (in place)."""
    fill = FILLERS.get((api_key, version))
    if fill is not None:
        fill(request)
