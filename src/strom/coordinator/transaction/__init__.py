"""The transaction coordinator: transactional ids, producer epochs and two-phase commit markers,
persisted as Kafka-format records in `__transaction_state`."""
