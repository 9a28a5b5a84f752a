"""What a partition's leader knows of its followers: their log end offsets and when each was
last caught up. Pure bookkeeping (no I/O), so the ISR and high-watermark rules are unit-tested.

Kafka's rules:
- a follower's log end offset is the offset it fetches from (it has everything below);
- a follower is *caught up* at a fetch when it asks for the leader's log end offset, or for at
  least the log end offset the leader had at its previous fetch (then it was caught up as of
  that previous fetch) — so a follower that keeps pace under steady load stays in sync;
- the high watermark is the smallest log end offset in the ISR, the leader's included; a
  follower whose offset is unknown (it has not fetched since this leader took over) holds it;
- a follower out of sync for longer than replica.lag.time.max.ms leaves the ISR; it joins again
  once it has reached the high watermark and the start of the leader's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerState:
    last_caught_up_ms: int
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_OFFSET


class LeaderState:
    """The followers of one partition led by this broker, since it became leader at
    ``epoch_start_offset`` with ``leader_epoch``."""

    def __init__(self, leader_id: int, replicas: list[int], leader_epoch: int,
                 epoch_start_offset: int, now_ms: int) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.followers: dict[int, FollowerState] = {}
        self.set_replicas(replicas, now_ms)

    def set_replicas(self, replicas: list[int], now_ms: int) -> None:
        """New followers start as caught up now (Kafka gives them a full lag window)."""
        wanted = [r for r in replicas if r != self.leader_id]
        for r in list(self.followers):
            if r not in wanted:
                del self.followers[r]
        for r in wanted:
            if r not in self.followers:
                self.followers[r] = FollowerState(last_caught_up_ms=now_ms)

    def record_fetch(self, replica: int, fetch_offset: int, leader_leo: int, now_ms: int) -> bool:
        """Note a follower's fetch; False for a broker that is not a replica of this partition."""
        f = self.followers.get(replica)
        if f is None:
            return False
        if fetch_offset >= leader_leo:
            f.last_caught_up_ms = max(f.last_caught_up_ms, now_ms)
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.last_fetch_leader_leo = leader_leo
        f.last_fetch_ms = now_ms
        return True

    def high_watermark(self, isr: list[int], leader_leo: int) -> int:
        """The smallest log end offset in the ISR (UNKNOWN_OFFSET while a member is unknown)."""
        hw = leader_leo
        for r in isr:
            if r == self.leader_id:
                continue
            f = self.followers.get(r)
            if f is None or f.log_end_offset == UNKNOWN_OFFSET:
                return UNKNOWN_OFFSET
            hw = min(hw, f.log_end_offset)
        return hw

    def out_of_sync(self, isr: list[int], now_ms: int, lag_max_ms: int) -> list[int]:
        """ISR followers that have not been caught up for longer than ``lag_max_ms``."""
        late = []
        for r in isr:
            if r == self.leader_id:
                continue
            f = self.followers.get(r)
            if f is None or now_ms - f.last_caught_up_ms > lag_max_ms:
                late.append(r)
        return late

    def ready_to_join(self, isr: list[int], high_watermark: int) -> list[int]:
        """Followers outside the ISR that have caught up enough to join it."""
        ready = []
        for r, f in self.followers.items():
            if r in isr or f.log_end_offset == UNKNOWN_OFFSET:
                continue
            if f.log_end_offset >= high_watermark and f.log_end_offset >= self.epoch_start_offset:
                ready.append(r)
        return sorted(ready)
