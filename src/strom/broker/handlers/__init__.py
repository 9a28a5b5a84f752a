"""One module per API (or small family of APIs); the router collects the marked functions.

ApiVersions is answered by the router itself (it lists its own routes and checks the client's
software name), so this package never needs importing from the router."""

from strom.broker.handlers import (
    acls,
    cluster,
    config_resources,
    configs,
    consumer_groups,
    describe_topics,
    features,
    fetch,
    groups,
    log_dirs,
    metadata,
    offsets,
    produce,
    quotas,
    reassignments,
    sasl,
    scram,
    share_fetch,
    share_groups,
    share_offsets,
    share_state,
    streams_groups,
    topics,
    transactions,
)

MODULES = [acls, cluster, config_resources, configs, consumer_groups, describe_topics, features,
           fetch, groups, log_dirs,
           metadata, offsets, produce, quotas, reassignments, sasl, scram, share_fetch,
           share_groups, share_offsets, share_state, streams_groups, topics, transactions]
