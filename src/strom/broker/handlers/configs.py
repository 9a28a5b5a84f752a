"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics, brokers and groups."""

from __future__ import annotations

from typing import Any

from strom.broker.authz import Op, Res, allowed, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    AlterConfigsRequest,
    DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
)
from strom.broker.router import handles
from strom.cluster.controller import too_many_records
from strom.common.slices import Slicer
from strom.config import group as group_config
from strom.config.broker import BROKER_CONFIGS
from strom.config.defs import ConfigError, ConfigSource, ConfigType
from strom.config.topic import BROKER_SYNONYMS, TOPIC_CONFIGS, validate_topic_configs
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import AclOperation
from strom.storage.cleaner.service import threads_change_error

TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
GROUP = 32

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _entry(name: str, value: str | None, source: int, *, read_only: bool, sensitive: bool,
           config_type: ConfigType, doc: str, synonyms: list[dict[str, Any]],
           include_docs: bool) -> dict[str, Any]:
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": sensitive,
        "synonyms": synonyms,
        "config_type": int(config_type),
        "documentation": doc if include_docs else None,
    }


def _broker_synonyms(broker: Broker, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every layer that sets one of these broker configs, strongest first, then the default."""
    config = broker.config
    out = []
    for layer, source in ((config.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (config.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (config.static, ConfigSource.STATIC_BROKER_CONFIG)):
        for name in names:
            if name in layer and layer[name] is not None:
                out.append({"name": name, "value": BROKER_CONFIGS[name].render(layer[name]),
                            "source": int(source)})
    for name in names:
        default = BROKER_CONFIGS[name].default
        if default is not None:
            out.append({"name": name, "value": BROKER_CONFIGS[name].render(default),
                        "source": int(ConfigSource.DEFAULT_CONFIG)})
            break
    return out


def describe_topic(broker: Broker, topic_name: str, keys: list[str] | None, synonyms: bool,
                   docs: bool) -> list[dict[str, Any]]:
    topic = broker.image.topics.get(topic_name)
    if topic is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         f"Topic '{topic_name}' does not exist.")
    out = []
    for name in TOPIC_CONFIGS.names():
        if keys is not None and name not in keys:
            continue
        d = TOPIC_CONFIGS[name]
        resolved = broker.partitions.resolve(topic, name)
        syn: list[dict[str, Any]] = []
        if synonyms:
            if name in topic.configs:
                syn.append({"name": name, "value": topic.configs[name],
                            "source": int(ConfigSource.DYNAMIC_TOPIC_CONFIG)})
            syn += _broker_synonyms(broker, BROKER_SYNONYMS.get(name, ()))
        out.append(_entry(name, d.render(resolved.value), int(resolved.source), read_only=False,
                          sensitive=d.sensitive, config_type=d.type, doc=d.doc, synonyms=syn,
                          include_docs=docs))
    return out


def describe_broker(broker: Broker, resource_name: str, keys: list[str] | None, synonyms: bool,
                    docs: bool) -> list[dict[str, Any]]:
    default_only = resource_name == ""
    if not default_only and resource_name != str(broker.broker_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {broker.broker_id} or empty string, "
                         f"but received {resource_name}")
    config = broker.config
    out = []
    for name in BROKER_CONFIGS.names():
        if keys is not None and name not in keys:
            continue
        d = BROKER_CONFIGS[name]
        if default_only:
            if name not in config.dynamic_default:
                continue
            value, source = config.dynamic_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        else:
            value, source = config.source_of(name)
        syn = _broker_synonyms(broker, (name,)) if synonyms else []
        out.append(_entry(name, d.render(value), int(source), read_only=d.read_only,
                          sensitive=d.sensitive, config_type=d.type, doc=d.doc, synonyms=syn,
                          include_docs=docs))
    return out


def describe_group(broker: Broker, group: str, keys: list[str] | None, synonyms: bool,
                   docs: bool) -> list[dict[str, Any]]:
    """Every group config with its value in force (a group need not exist): the group's own
    (DYNAMIC_GROUP_CONFIG), else its broker synonym's, else its default. Kafka's internal
    group configs only when the group sets them."""
    if group == "":
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    overrides = broker.image.group_configs.get(group, {})
    config = broker.config
    out = []
    for name in sorted(group_config.GROUP_CONFIGS.names()):
        if keys is not None and name not in keys:
            continue
        if name in group_config.INTERNAL and name not in overrides:
            continue
        d = group_config.GROUP_CONFIGS[name]
        value, source, found = group_config.resolve(name, overrides, config.get, config.source_of)
        syn = [{"name": n, "value": group_config.render(n, v), "source": int(src)}
               for n, v, src in found] if synonyms else []
        out.append(_entry(name, group_config.render(name, value), int(source), read_only=False,
                          sensitive=False, config_type=d.type, doc=d.doc, synonyms=syn,
                          include_docs=docs))
    return out


@handles(ApiKey.DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(broker: Broker, ctx: RequestContext,
                           request: DescribeConfigsRequest) -> dict[str, Any]:
    synonyms, docs = request.include_synonyms, request.include_documentation
    results = []
    slicer = Slicer()  # a resource costs ~0.5 ms: thousands in one request share the loop
    for r in request.resources:
        await slicer.tick()
        keys = list(r.configuration_keys) if r.configuration_keys is not None else None
        result: dict[str, Any] = {"error_code": 0, "error_message": None,
                                  "resource_type": r.resource_type,
                                  "resource_name": r.resource_name, "configs": []}
        try:
            _authorize(broker, ctx, Op.DESCRIBE_CONFIGS, r.resource_type, r.resource_name)
            if r.resource_type == TOPIC:
                result["configs"] = describe_topic(broker, r.resource_name, keys, synonyms, docs)
            elif r.resource_type == BROKER:
                result["configs"] = describe_broker(broker, r.resource_name, keys, synonyms, docs)
            elif r.resource_type == BROKER_LOGGER:
                result["configs"] = []
            elif r.resource_type == GROUP:
                result["configs"] = describe_group(broker, r.resource_name, keys, synonyms, docs)
            else:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Unsupported resource type {r.resource_type}")
        except KafkaError as exc:
            result.update(error_code=int(exc.code), error_message=exc.message)
        results.append(result)
    return {"throttle_time": 0, "results": results}


def _authorize(broker: Broker, ctx: RequestContext, op: AclOperation, resource_type: int,
               name: str) -> None:
    """ACLs on a config resource, as Kafka maps them: a topic's are the topic's, a group's the
    group's, a broker's (and its loggers') the cluster's."""
    if broker.authorizer is None:
        return
    if resource_type == TOPIC:
        if not allowed(broker, ctx, op, Res.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed.")
    elif resource_type == GROUP:
        if not allowed(broker, ctx, op, Res.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.")
    elif not cluster_allowed(broker, ctx, op):
        raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")


# -- altering ------------------------------------------------------------------------------


def _current_overrides(broker: Broker, resource_type: int, name: str,
                       forwarded: bool = False) -> dict[str, str]:
    """The dynamic configs a resource has now. A broker resource must name this broker (or
    be the cluster default), unless another broker forwarded the request to this one as the
    active controller of a KRaft cluster: it was sent to the broker it names."""
    if resource_type == TOPIC:
        topic = broker.image.topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Topic '{name}' does not exist.")
        return dict(topic.configs)
    if resource_type == BROKER:
        if name not in ("", str(broker.broker_id)) and not forwarded:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unexpected broker id, expected {broker.broker_id} or empty string, "
                             f"but received {name}")
        return dict(broker.image.broker_configs.get(name, {}))
    if resource_type == GROUP:
        if name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        return dict(broker.image.group_configs.get(name, {}))
    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource_type}")


def _validate(broker: Broker, resource_type: int, wanted: dict[str, str]) -> None:
    try:
        if resource_type == TOPIC:
            validate_topic_configs(wanted)
            return
        if resource_type == GROUP:  # the group's whole set, against the broker's bounds
            group_config.validate_group_configs(wanted, broker.config.get)
            return
        for key, value in wanted.items():
            if key not in BROKER_CONFIGS:
                raise ConfigError(f"Unknown broker config name: {key}")
            if BROKER_CONFIGS[key].read_only:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Cannot update these configs dynamically: [{key}]")
            if not BROKER_CONFIGS[key].implemented:  # changing it would change nothing
                raise ConfigError(f"{key} has no effect in Strom: "
                                  f"{BROKER_CONFIGS[key].doc}")
            try:
                BROKER_CONFIGS.parse(key, value)
            except ConfigError as exc:  # Kafka 4.4 answers a bad broker value INVALID_REQUEST
                raise KafkaError(ErrorCode.INVALID_REQUEST, str(exc)) from None
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None


def _check_reconfiguration(broker: Broker, name: str, layer: dict[str, str]) -> None:
    """Kafka checks a change of this broker's configs (its own or the cluster-wide defaults)
    against what it runs with, when the value in effect here changes: a new log.cleaner.threads
    must stay within half and double the current count. Other brokers of a cluster check a new
    default when they apply it (the cleaner keeps its count, `LogCleaner.refresh`)."""
    key = "log.cleaner.threads"
    config = broker.config
    wanted = BROKER_CONFIGS.parse(key, layer[key]) if key in layer else None
    if name == "":  # this broker's own value, if any, still wins over the new default
        node, default = config.dynamic_broker.get(key), wanted
    else:
        node, default = wanted, config.dynamic_default.get(key)
    new = next((v for v in (node, default) if v is not None),
               config.static.get(key, BROKER_CONFIGS[key].default))
    current = config.get(key)
    error = threads_change_error(current, new) if new != current else None
    if error is not None:  # Kafka 4.4's answer: a ConfigException inside a ConfigException
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Invalid value org.apache.kafka.common.config.ConfigException: {error} "
                         "for configuration Invalid dynamic configuration")


async def _apply(broker: Broker, resource_type: int, name: str, current: dict[str, str],
           wanted: dict[str, str], validate_only: bool) -> None:
    _validate(broker, resource_type, wanted)
    if resource_type == BROKER:
        _check_reconfiguration(broker, name, wanted)
    if validate_only:
        return
    changes: dict[str, str | None] = {k: v for k, v in wanted.items() if current.get(k) != v}
    changes.update({k: None for k in current if k not in wanted})
    resource = {TOPIC: "topic", GROUP: "group"}.get(resource_type, "broker")
    await broker.controller.alter_configs(resource, name, changes)


@handles(ApiKey.ALTER_CONFIGS, 0, 2)
async def alter_configs(broker: Broker, ctx: RequestContext,
                        request: AlterConfigsRequest) -> dict[str, Any]:
    responses = []
    too_large = _too_many_entries(request.resources)
    slicer = Slicer()  # applying a resource costs a metadata record (~0.2 ms)
    for r in request.resources:
        await slicer.tick()
        response = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                    "resource_name": r.resource_name}
        try:
            if too_large is not None:
                raise too_large
            _authorize(broker, ctx, Op.ALTER_CONFIGS, r.resource_type, r.resource_name)
            current = _current_overrides(broker, r.resource_type, r.resource_name,
                                         ctx.session.forwarded)
            wanted = {c.name: c.value for c in r.configs if c.value is not None}
            await _apply(broker, r.resource_type, r.resource_name, current, wanted, request.validate_only)
        except KafkaError as exc:
            response.update(error_code=int(exc.code), error_message=exc.message)
        responses.append(response)
    return {"throttle_time": 0, "responses": responses}


def _too_many_entries(resources: Any) -> KafkaError | None:
    """Kafka's controller writes at most MAX_RECORDS_PER_USER_OP config records per request and
    fails the whole request beyond (POLICY_VIOLATION). Each entry counts here, also one that
    changes nothing (Kafka counts the records written: stricter only for such no-op entries)."""
    return too_many_records(sum(len(r.configs) for r in resources),
                            "Unable to perform excessively large batch operation.")


def _list_type(resource_type: int, key: str) -> bool:
    registry = TOPIC_CONFIGS if resource_type == TOPIC else BROKER_CONFIGS
    return key in registry and registry[key].type == ConfigType.LIST


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(broker: Broker, ctx: RequestContext,
                                    request: IncrementalAlterConfigsRequest) -> dict[str, Any]:
    responses = []
    too_large = _too_many_entries(request.resources)
    slicer = Slicer()  # applying a resource costs a metadata record (~0.2 ms)
    for r in request.resources:
        await slicer.tick()
        response = {"error_code": 0, "error_message": None, "resource_type": r.resource_type,
                    "resource_name": r.resource_name}
        try:
            if too_large is not None:
                raise too_large
            _authorize(broker, ctx, Op.ALTER_CONFIGS, r.resource_type, r.resource_name)
            current = _current_overrides(broker, r.resource_type, r.resource_name,
                                         ctx.session.forwarded)
            wanted = dict(current)
            seen: set[str] = set()
            for c in r.configs:
                if c.name in seen:
                    raise KafkaError(ErrorCode.INVALID_REQUEST,
                                     f"Error due to duplicate config keys: {c.name}")
                seen.add(c.name)
                op = c.config_operation
                if op == SET:
                    if c.value is None:
                        raise KafkaError(ErrorCode.INVALID_REQUEST,
                                         f"Null value not supported for: {c.name}")
                    wanted[c.name] = c.value
                elif op == DELETE:
                    wanted.pop(c.name, None)
                elif op in (APPEND, SUBTRACT) and r.resource_type == GROUP:
                    # Kafka 4.4 knows no group config's type here, list or not
                    raise KafkaError(ErrorCode.INVALID_CONFIG,
                                     f"Can't {'APPEND' if op == APPEND else 'SUBTRACT'} to key "
                                     f"{c.name} because its type is not LIST.")
                elif op in (APPEND, SUBTRACT):
                    if not _list_type(r.resource_type, c.name):
                        raise KafkaError(ErrorCode.INVALID_CONFIG,
                                         f"Config value append/subtract is not allowed for "
                                         f"config key: {c.name}")
                    items = (_split(wanted[c.name]) if c.name in wanted
                             else _default_list(broker, r, c.name))
                    new = [x.strip() for x in (c.value or "").split(",") if x.strip()]
                    if op == APPEND:
                        items += [x for x in new if x not in items]
                    else:
                        items = [x for x in items if x not in new]
                    wanted[c.name] = ",".join(items)
                else:
                    raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op}")
            await _apply(broker, r.resource_type, r.resource_name, current, wanted,
                   request.validate_only)
        except KafkaError as exc:
            response.update(error_code=int(exc.code), error_message=exc.message)
        responses.append(response)
    return {"throttle_time": 0, "responses": responses}


def _default_list(broker: Broker, resource: Any, key: str) -> list[str]:
    if resource.resource_type == TOPIC:
        value = broker.config.topic_default(key).value
    else:
        value = broker.config.get(key)
    return _split(value) if isinstance(value, str) else list(value or [])


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


