"""Kafka's Raft (KIP-595) for the metadata quorum."""
