"""Messages newer than kio, written in the shape of kio's generated classes.

kio is generated from one Kafka release's JSON specs, so an API added later has no class there.
The classes below follow kio's generated code attribute for attribute (class variables, field
names, ``kafka_type`` metadata, nullability), so `schema.struct_schema` and the codec treat
them exactly like kio's own; drop each one once kio ships it.

- UnregisterController (key 94, v0, flexible; Kafka 4.4, KIP-1312): removes a controller's
  registration. Request: ControllerId int32. Response: ThrottleTimeMs int32, ErrorCode int16,
  ErrorMessage nullable string.
"""

# No ``from __future__ import annotations``: schema.py reads these annotations as types (as
# kio's generated modules have them), not as strings.
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta
from kio.static.protocol import Entity

__all__ = ["EXTRA_ENTITIES", "EXTRA_VERSIONS"]

UNREGISTER_CONTROLLER = 94


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterControllerRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UNREGISTER_CONTROLLER)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    controller_id: i32 = field(metadata={"kafka_type": "int32"})
    """The controller ID to unregister."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterControllerResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(UNREGISTER_CONTROLLER)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """Time the request was throttled for a quota violation, or zero."""
    error_code: i16 = field(metadata={"kafka_type": "error_code"})
    """The error code, or 0 if there was no error."""
    error_message: str | None = field(metadata={"kafka_type": "string"})
    """The top-level error message, or null if there was no top-level error."""


# (api key, version, side) -> class, and api key -> (min, max) version.
EXTRA_ENTITIES: dict[tuple[int, int, str], type[Entity]] = {
    (UNREGISTER_CONTROLLER, 0, "request"): UnregisterControllerRequest,
    (UNREGISTER_CONTROLLER, 0, "response"): UnregisterControllerResponse,
}
EXTRA_VERSIONS: dict[int, tuple[int, int]] = {UNREGISTER_CONTROLLER: (0, 0)}
