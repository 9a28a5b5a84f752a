"""One error map for every coordinator: what a failed or unreplicated state-topic write means
to the client of a coordinator API.

Kafka maps append errors the same way in its group, transaction and share coordinators: a
partition that is not ours (or whose disk failed) means "find the coordinator again"; too few
replicas or a timeout means "the coordinator is not available, retry"; a record too large for
the state topic is the coordinator's own fault. Clients retry both retriable answers, so a
write that was not replicated is never reported as done.
"""

from __future__ import annotations

from strom.protocol.errors import ErrorCode, KafkaError

_MAP = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    # this broker's leadership is in doubt (its cluster view is stale): retry, maybe elsewhere
    ErrorCode.LEADER_NOT_AVAILABLE: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.INVALID_FETCH_SIZE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def coordinator_error(code: int) -> ErrorCode:
    """The code a coordinator answers for a storage or replication error `code`."""
    code = ErrorCode(code)
    return _MAP.get(code, code)


def append_error(exc: Exception) -> KafkaError:
    """A KafkaError with the coordinator's code for an exception raised by an append."""
    return KafkaError(coordinator_error(getattr(exc, "error_code",
                                                ErrorCode.UNKNOWN_SERVER_ERROR)), str(exc))
