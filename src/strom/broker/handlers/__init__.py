"""One module per API (or small family of APIs); the router collects the marked functions."""

from strom.broker.handlers import (
    api_versions,
    cluster,
    configs,
    consumer_groups,
    fetch,
    groups,
    metadata,
    offsets,
    produce,
    reassignments,
    topics,
    transactions,
)

MODULES = [api_versions, cluster, configs, consumer_groups, fetch, groups, metadata, offsets, produce,
           reassignments, topics, transactions]
