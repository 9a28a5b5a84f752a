"""The share coordinator (KIP-932): durable state of share partitions in `__share_group_state`.

A share partition is one topic partition as one share group consumes it. Its leader (the
broker leading the topic partition, `strom.broker.share`) keeps the in-flight records in
memory and writes every change of their state here before it answers the client; this package
keeps that state as Kafka's share coordinator does (snapshots plus updates) and reads it back
when the partition's leadership moves or the broker restarts.
"""
