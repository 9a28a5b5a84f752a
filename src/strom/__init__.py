"""Strom: a Kafka-compatible distributed commit log."""

__version__ = "0.1.0"
