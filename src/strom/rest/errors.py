"""Confluent REST Proxy's error bodies (``{"error_code": ..., "message": ...}``) and the map
from Kafka's error codes to them.

``error_code`` is the HTTP status, or a five-digit refinement of it whose first three digits are
the status (40401: topic not found; 40403: consumer instance not found; 42201: schema missing).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from strom.protocol.errors import ErrorCode

# Confluent REST Proxy's own codes
TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CONSUMER_INSTANCE_NOT_FOUND = 40403
LEADER_NOT_AVAILABLE = 40404
CONSUMER_FORMAT_MISMATCH = 40601
CONSUMER_ALREADY_SUBSCRIBED = 40901
CONSUMER_ALREADY_EXISTS = 40902
ILLEGAL_STATE = 40903
KEY_SCHEMA_MISSING = 42201
VALUE_SCHEMA_MISSING = 42202
JSON_CONVERSION = 42203
INVALID_CONSUMER_CONFIG = 42204
INVALID_SCHEMA = 42205
KAFKA_ERROR = 50001
KAFKA_RETRIABLE_ERROR = 50003

V2_JSON = "application/vnd.kafka.v2+json"
V2_PATHS = "/consumers"  # the v2 API's resources (Strom serves its consumers only)


class RestError(Exception):
    """An error answered with Confluent's body; ``status`` defaults to the code's first three
    digits."""

    def __init__(self, error_code: int, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.status = status if status is not None else int(str(error_code)[:3])

    def body(self) -> dict[str, Any]:
        return {"error_code": self.error_code, "message": self.message}


def not_found(message: str, error_code: int = 404) -> RestError:
    return RestError(error_code, message, 404)


def bad_request(message: str) -> RestError:
    return RestError(400, message)


def unprocessable(message: str, error_code: int = 422) -> RestError:
    return RestError(error_code, message, 422)


_KAFKA_TO_HTTP: dict[int, tuple[int, int]] = {  # Kafka code -> (status, error_code)
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (404, 40403),
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: (403, 40301),
    ErrorCode.GROUP_AUTHORIZATION_FAILED: (403, 40301),
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: (403, 40301),
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: (403, 40301),
    ErrorCode.SASL_AUTHENTICATION_FAILED: (401, 40101),
    ErrorCode.TOPIC_ALREADY_EXISTS: (400, 40002),
    ErrorCode.INVALID_TOPIC_EXCEPTION: (400, 40002),
    ErrorCode.INVALID_PARTITIONS: (400, 40002),
    ErrorCode.INVALID_REPLICATION_FACTOR: (400, 40002),
    ErrorCode.INVALID_REPLICA_ASSIGNMENT: (400, 40002),
    ErrorCode.INVALID_CONFIG: (400, 40002),
    ErrorCode.POLICY_VIOLATION: (400, 40002),
    ErrorCode.INVALID_REQUEST: (400, 40002),
    ErrorCode.GROUP_ID_NOT_FOUND: (404, 404),
    ErrorCode.NON_EMPTY_GROUP: (400, 40002),
    ErrorCode.MESSAGE_TOO_LARGE: (413, 413),
    ErrorCode.RECORD_LIST_TOO_LARGE: (413, 413),
    ErrorCode.INVALID_RECORD: (400, 40002),
    ErrorCode.INVALID_TIMESTAMP: (400, 40002),
    ErrorCode.CORRUPT_MESSAGE: (400, 40002),
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: (429, 429),
}


def kafka_error(code: int, message: str, retriable: bool = False) -> RestError:
    """A Kafka error as Confluent's REST Proxy reports it: the client's fault as 4xx, a
    retriable broker state as 50003, anything else as 50001."""
    found = _KAFKA_TO_HTTP.get(code)
    if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        message = "This server does not host this topic-partition."  # Confluent's wording
    if found is not None:
        return RestError(found[1], message, found[0])
    return RestError(KAFKA_RETRIABLE_ERROR if retriable else KAFKA_ERROR, message, 500)


def error_media_type(request: Request) -> str:
    """The type of an error body: v3 answers application/json; v2, as Confluent's, the v2
    type its resources produce, unless the client accepts application/json and no v2 type."""
    if not request.url.path.startswith(V2_PATHS):
        return "application/json"
    accept = request.headers.get("accept", "").lower()
    if "application/json" in accept and "vnd.kafka." not in accept and "*/*" not in accept \
            and "application/*" not in accept:
        return "application/json"
    return V2_JSON


async def rest_error_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RestError)
    return JSONResponse(exc.body(), status_code=exc.status,
                        media_type=error_media_type(request))
