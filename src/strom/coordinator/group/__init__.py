"""The group coordinator: classic groups (JoinGroup/SyncGroup), KIP-848 consumer groups and
committed offsets, persisted as Kafka-format records in `__consumer_offsets`."""
