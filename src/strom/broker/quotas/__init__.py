"""Client quotas, enforced as Kafka does: a client's rate is measured over a sliding window,
and one over its quota gets ``throttle_time_ms`` in its response and its connection muted for
that long (KIP-219). The quotas themselves live in the metadata image
(`strom.cluster.quotas`)."""
