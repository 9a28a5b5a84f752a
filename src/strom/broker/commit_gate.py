"""Coordinator APIs answer only once what they wrote or read is committed.

The coordinators apply a change when its record is in the leader's log; the client hears of it
only after the state partition's in-sync replicas have it (`strom.coordinator.runtime.commits`).
This module is the broker's one hook for that: the router wraps the handler of every API in
`COMMITTED_APIS` with `answered_once_committed`, which collects the state partitions the
request touched, waits for them, and turns every success the reply claims into the
coordinator's error for the failed wait (NOT_COORDINATOR after a leader change,
COORDINATOR_NOT_AVAILABLE when the replicas are too few or too slow), which clients retry.

`ReplicaCommits` is the runtime's `Replication` over a cluster's replica manager; a single node
has none and its coordinators answer at once. While this broker's view of the cluster is not
current (`metadata_current`: its ZooKeeper session is down or not re-read yet), it may lead a
state partition only in its own stale image: every check and wait fails with
LEADER_NOT_AVAILABLE (COORDINATOR_NOT_AVAILABLE to the client, who finds the coordinator again)
instead of answering from state another broker may have moved past. Retriable, not
NOT_COORDINATOR: when the leadership did not move after all, the coordinator's own waits (the
markers after PrepareCommit, CompleteCommit) must try again rather than leave it to a
successor that never comes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from strom.coordinator.runtime.commits import tracking
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from strom.broker.core import Broker, Node
    from strom.cluster.replication.manager import ReplicaManager

K = ApiKey
# Every API served by a coordinator (group, transaction, share): a reply built from coordinator
# state is held until that state is committed.
COMMITTED_APIS = frozenset({
    K.JOIN_GROUP, K.SYNC_GROUP, K.HEARTBEAT, K.LEAVE_GROUP, K.OFFSET_COMMIT, K.OFFSET_FETCH,
    K.OFFSET_DELETE, K.DESCRIBE_GROUPS, K.DELETE_GROUPS, K.CONSUMER_GROUP_HEARTBEAT,
    K.CONSUMER_GROUP_DESCRIBE, K.STREAMS_GROUP_HEARTBEAT, K.STREAMS_GROUP_DESCRIBE,
    K.SHARE_GROUP_HEARTBEAT, K.SHARE_GROUP_DESCRIBE, K.INIT_PRODUCER_ID, K.ADD_PARTITIONS_TO_TXN,
    K.ADD_OFFSETS_TO_TXN, K.END_TXN, K.TXN_OFFSET_COMMIT, K.DESCRIBE_TRANSACTIONS,
    K.INITIALIZE_SHARE_GROUP_STATE, K.READ_SHARE_GROUP_STATE, K.WRITE_SHARE_GROUP_STATE,
    K.DELETE_SHARE_GROUP_STATE, K.READ_SHARE_GROUP_STATE_SUMMARY, K.DESCRIBE_SHARE_GROUP_OFFSETS,
    K.ALTER_SHARE_GROUP_OFFSETS, K.DELETE_SHARE_GROUP_OFFSETS,
})

_ERROR_FIELDS = ("error_code", "partition_error_code")


def fail_successes(reply: Any, code: int) -> None:
    """Set every error code of `reply` that says success to `code` (the reply's claims all
    rest on the state that was not committed)."""
    if isinstance(reply, dict):
        for name, value in reply.items():
            if name in _ERROR_FIELDS and value == 0:
                reply[name] = int(code)
            elif isinstance(value, dict | list):
                fail_successes(value, code)
    elif isinstance(reply, list):
        for item in reply:
            fail_successes(item, code)


def answered_once_committed(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A generic handler whose reply waits for the state partitions the request touched."""

    @functools.wraps(fn)
    def handler(broker: Broker, ctx: Any, request: Any) -> Any:
        if broker.commits.replication is None:
            return fn(broker, ctx, request)
        return _once_committed(fn, broker, ctx, request)

    return handler


async def _once_committed(fn: Callable[..., Any], broker: Broker, ctx: Any, request: Any) -> Any:
    with tracking() as touched:
        reply = fn(broker, ctx, request)
        if inspect.isawaitable(reply):
            reply = await reply
    if touched and reply is not None:
        code = await broker.commits.settle(touched)
        if code:
            fail_successes(reply, code)
    return reply


def _always() -> bool:
    return True


class ReplicaCommits:
    """The coordinator runtime's `Replication` over a cluster's replica manager."""

    def __init__(self, node: Node, replicas: ReplicaManager,
                 metadata_current: Callable[[], bool] = _always) -> None:
        self.node = node
        self.replicas = replicas
        self.metadata_current = metadata_current

    def check(self, topic: str, partition: int) -> int:
        if not self.metadata_current():
            return ErrorCode.LEADER_NOT_AVAILABLE
        return self.replicas.min_isr_error((topic, partition))

    def end_offset(self, topic: str, partition: int) -> int | None:
        plog = self.node.partitions.get(topic, partition)
        return plog.log_end_offset if plog is not None else None

    async def wait(self, topic: str, partition: int, offset: int, timeout_s: float) -> int:
        if not self.metadata_current():
            return ErrorCode.LEADER_NOT_AVAILABLE
        code = await self.replicas.wait_for_replication((topic, partition), offset, timeout_s)
        if code == ErrorCode.NONE and not self.metadata_current():  # lost it meanwhile
            return ErrorCode.LEADER_NOT_AVAILABLE
        return code
