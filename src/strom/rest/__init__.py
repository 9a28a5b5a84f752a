"""Strom over HTTP (`rest.listeners`): Confluent REST Proxy's v3 and v2 APIs, share groups and
event streams for thin clients.

It runs in a process of its own that the broker starts and stops (`strom.broker.rest_listener`),
and is a Kafka client of that broker (librdkafka, through confluent-kafka): a slow or hostile HTTP
client costs the broker no more than any Kafka client does, and every request passes the broker's
own checks. With basic authentication the HTTP user's credentials are the Kafka client's SASL
credentials, so the broker's ACLs decide what each HTTP user may do.

    process     the process's start: settings handed over by the broker, uvicorn on its socket
    context     what every endpoint reaches: settings, Kafka clients per user, URLs
    clients     one set of Kafka clients per user, created on first use, closed when idle
    errors      Confluent's error bodies; Kafka errors mapped to them
    formats     embedded formats: BINARY, JSON, STRING, and AVRO/JSONSCHEMA/PROTOBUF
    v3/         REST Proxy v3: clusters, brokers, topics, configs, partitions, groups, records
    v2/         REST Proxy v2 consumer instances
    share, sse  Strom's own: share groups over HTTP, Server-Sent Events of a topic
    openapi     the OpenAPI document, assembled from each module's paths
"""
