"""The goals the table judges, in one place: the ones set against Tansu in the first round,
and issue 21's against Apache Kafka 4.4. Each ratio goal names its peer (by the label the
harness gives it), so a sitting without that peer simply leaves the goal out."""

from __future__ import annotations

from bench.report import Target

TANSU = "Tansu"
KAFKA = "Kafka"
RSS_LIMIT_MB = 300


def at_least(value: float, peer: str) -> Target:
    """Strom's median >= value x the peer's (rates)."""
    return Target("ratio_min", value, peer=peer)


def at_most(value: float, peer: str) -> Target:
    """Strom's median <= value x the peer's (times, latencies, memory)."""
    return Target("ratio_max", value, peer=peer)


# produce/consume MB/s and records per broker-CPU-second at 1 and 10 KiB
RATE_GOALS = (at_least(2.0, TANSU), at_least(1.0, KAFKA))
# broker memory, in every scenario
RSS_GOALS = (Target("max", RSS_LIMIT_MB), at_most(0.25, KAFKA))
# the same memory goal where no fixed ceiling applies (a 3-broker cluster's sum)
RSS_VS_KAFKA = at_most(0.25, KAFKA)
# issue 31: produce of 1 KiB Avro records to a schema-validated topic, against Kafka's MB/s on
# an unvalidated topic (id mode, decode mode) and against Strom's own on an unvalidated one
VALIDATED_ID_GOAL = at_least(1.0, KAFKA)
VALIDATED_DECODE_GOAL = at_least(0.4, KAFKA)
VALIDATED_VS_UNVALIDATED = Target("min", 0.8)
# issue 32: Kafka-protocol produce while HTTP produce runs at half its measured maximum, against
# the same produce alone, on one broker in one run
HTTP_LOAD_COST_GOAL = Target("min", 0.9)
# issue 33: Kafka-protocol produce (and consume) while the lake writer writes Iceberg tables,
# against the same without, on one broker in one run
ICEBERG_LOAD_COST_GOAL = Target("min", 0.9)
