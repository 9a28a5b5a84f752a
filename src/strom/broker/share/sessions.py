"""Share sessions (KIP-932): which partitions a member fetches from this broker.

A ShareFetch with session epoch 0 opens a session listing its partitions; later requests (epoch
1, 2, ...) add partitions and forget others, and fetch from every partition of the session
whether or not they are named again, as incremental Fetch sessions do; epoch -1 closes it (the
member is leaving). ShareAcknowledge moves the epoch too and may close the session but cannot
open one. At most `group.share.max.share.sessions` sessions are open at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from strom.protocol.errors import ErrorCode, KafkaError

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT_MAX = 2147483647

TopicIdPartition = tuple[uuid.UUID, int]


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    connection_id: int = -1  # the connection that opened it: it ends with that connection
    next_epoch: int = 1
    # insertion-ordered: the fetch starts after the partition that answered last (fairness)
    partitions: dict[TopicIdPartition, None] = field(default_factory=dict)
    rotation: int = 0

    def advance(self) -> None:
        self.next_epoch = 1 if self.next_epoch >= INT_MAX else self.next_epoch + 1

    def ordered(self) -> list[TopicIdPartition]:
        """The session's partitions, rotated so that each fetch starts somewhere else."""
        parts = list(self.partitions)
        if not parts:
            return parts
        start = self.rotation % len(parts)
        self.rotation += 1
        return parts[start:] + parts[:start]


class ShareSessionCache:
    def __init__(self, max_sessions: int = 2000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def for_fetch(self, group_id: str, member_id: str, epoch: int,
                  add: Iterable[TopicIdPartition], forget: Iterable[TopicIdPartition],
                  connection_id: int = -1) -> ShareSession:
        """The session a ShareFetch works in (opened, moved on, or about to close); raises
        KafkaError with Kafka's share-session errors."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if key not in self._sessions and len(self._sessions) >= self.max_sessions:
                raise KafkaError(ErrorCode.SHARE_SESSION_LIMIT_REACHED,
                                 f"The limit of {self.max_sessions} share sessions is reached.")
            session = ShareSession(group_id, member_id, connection_id)
            self._sessions[key] = session
        else:
            session = self._checked(key, epoch)
        for tp in forget:
            session.partitions.pop(tp, None)
        for tp in add:
            session.partitions.setdefault(tp, None)
        return session

    def for_acknowledge(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a ShareAcknowledge works in; it cannot open one."""
        if epoch == INITIAL_EPOCH:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             "A ShareAcknowledge cannot open a share session (epoch 0).")
        return self._checked((group_id, member_id), epoch)

    def _checked(self, key: tuple[str, str], epoch: int) -> ShareSession:
        session = self._sessions.get(key)
        if session is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND,
                             f"There is no share session for member {key[1]} of group "
                             f"{key[0]} on this broker.")
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.next_epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"The share session epoch is {epoch}, expected "
                             f"{session.next_epoch}.")
        session.advance()
        return session

    def has_group(self, group_id: str) -> bool:
        """Whether a member of the group has a share session here."""
        return any(g == group_id for g, _ in self._sessions)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def close_member(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)

    def close_connection(self, group_id: str, member_id: str, connection_id: int) -> bool:
        """The connection closed: end the member's session if that connection opened it."""
        session = self._sessions.get((group_id, member_id))
        if session is None or session.connection_id != connection_id:
            return False
        del self._sessions[(group_id, member_id)]
        return True
