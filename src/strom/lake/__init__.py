"""Iceberg topics (issue 33, point 2): the lake writer, `python -m strom.lake`, a process the
broker starts with `iceberg.enable=true` (strom.broker.lake_listener). It reads every topic whose
`iceberg.mode` is not `disabled` as a Kafka client of its broker and appends the records to the
Iceberg table `<iceberg.namespace>.<topic>` with pyiceberg, every `iceberg.commit.interval.ms`:
the value as bytes (`key_value`) or decoded with the topic's Avro value schema from Strom's
registry (`value_schema`, strom.lake.value_schema).

Exactly once: each snapshot's summary records, under `strom.offsets`, the next offset of every
partition the table holds; the writer resumes from the latest snapshot, checks those offsets
again before every commit and commits without pyiceberg's retries, so a restart, a kill -9 or a
second writer never writes a record twice or skips one. pyiceberg is imported here only.
"""
