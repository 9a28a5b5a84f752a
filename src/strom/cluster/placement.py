"""Where new partitions' replicas go: Kafka's replica assignment, rack-aware when racks are set.

Kafka's rules (its AdminUtils): replicas of a partition are spread by a start index and a
shift, both random, so leaders (the first replicas) are balanced over the brokers and followers
over the others. With `broker.rack` on every broker, the brokers are first interleaved by rack,
and a partition's replicas go to as many different racks as possible (min(racks, RF)).
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from strom.protocol.errors import ErrorCode, KafkaError


def _replica_index(first: int, shift: int, k: int, n: int) -> int:
    return (first + 1 + (shift + k) % (n - 1)) % n


def rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers interleaved by rack: one from each rack (racks and brokers sorted), repeat."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    lists = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for i in range(max(len(x) for x in lists)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def assign_replicas(brokers: list[int], racks: Mapping[int, str | None], partitions: int,
                    replication_factor: int, *, first_partition: int = 0,
                    rng: random.Random | None = None) -> dict[int, list[int]]:
    """Replicas of partitions first_partition.. first_partition+partitions-1."""
    n = len(brokers)
    if replication_factor > n:
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"Replication factor: {replication_factor} larger than available "
                         f"brokers: {n}.")
    rng = rng or random.Random()
    with_rack = {b: racks.get(b) for b in brokers}
    if any(r is not None for r in with_rack.values()):
        if any(r is None for r in with_rack.values()):
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             "Not all brokers have rack information for replica rack aware "
                             "assignment.")
        return _rack_aware({b: str(r) for b, r in with_rack.items()}, partitions,
                           replication_factor, first_partition, rng)
    ordered = sorted(brokers)
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        replicas += [ordered[_replica_index(first, shift, k, n)]
                     for k in range(replication_factor - 1)]
        out[p] = replicas
    return out


def _rack_aware(racks: dict[int, str], partitions: int, rf: int, first_partition: int,
                rng: random.Random) -> dict[int, list[int]]:
    arranged = rack_alternated(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    start = rng.randrange(n)
    shift = rng.randrange(n)
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        used = {leader}
        k = 0
        for _ in range(rf - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                rack = racks[broker]
                if ((rack not in used_racks or len(used_racks) == num_racks)
                        and (broker not in used or len(used) == n)):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
                    break
        out[p] = replicas
    return out
