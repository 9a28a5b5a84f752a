"""The web console (`strom console`): a Kafka client that shows the cluster, topics, records and
consumer groups in a browser, with an hour of throughput and lag kept in memory.

It speaks only the Kafka protocol (confluent-kafka, plus `strom.cli.wire` for the log-dir sizes
librdkafka cannot ask for), so it works against Apache Kafka too. Nothing in the broker imports it.
"""
