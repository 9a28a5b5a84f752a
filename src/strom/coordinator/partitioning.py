"""Which partition of an internal topic owns a key: Kafka's `Utils.abs(key.hashCode()) % n`.

The group (and transaction) coordinator of a key is the leader of that partition, so every
broker, Strom or Kafka, must map keys exactly as Kafka does: Java's `String.hashCode` over
UTF-16 code units with 32-bit wrap-around, then Kafka's `Utils.abs` (MIN_VALUE maps to 0).
"""

from __future__ import annotations

INT_MIN = -(1 << 31)


def java_string_hashcode(s: str) -> int:
    """`java.lang.String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's `Utils.abs`: like Math.abs, but Integer.MIN_VALUE maps to 0 (not to itself)."""
    return 0 if n == INT_MIN else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    """The `__consumer_offsets` / `__transaction_state` partition of a group or transactional id."""
    return kafka_abs(java_string_hashcode(key)) % num_partitions
