"""Schema Registry served by Strom: Confluent-compatible schemas, subjects and compatibility."""
