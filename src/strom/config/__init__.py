"""Configuration: Kafka's broker and topic config names, types, defaults and validation."""
