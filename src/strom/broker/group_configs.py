"""The broker's `GroupConfigs`: each group's configs in force, from the metadata image.

A group's overrides are ConfigRecords of resource type GROUP in the metadata (the single node's
log, or /config/groups in ZooKeeper); the broker configs they fall back to are this broker's
(static, dynamic). Values are resolved on first use and cached until a record changes the
group's overrides or a dynamic broker config changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from strom.cluster.image import MetadataImage
from strom.cluster.records import Change
from strom.config import group as group_config
from strom.config.broker import BrokerConfig
from strom.coordinator.group.group_configs import ChangeListener, EffectiveGroupConfig

log = logging.getLogger(__name__)


class MetadataGroupConfigs:
    """`strom.coordinator.group.group_configs.GroupConfigs` over the metadata image. Give
    `on_changes` the controller's metadata changes (after the partition manager's, which
    refreshes the dynamic broker configs)."""

    def __init__(self, config: BrokerConfig, image: Callable[[], MetadataImage]) -> None:
        self._config = config
        self._image = image
        self._cache: dict[str, EffectiveGroupConfig] = {}
        self._listeners: list[ChangeListener] = []

    def for_group(self, group_id: str) -> EffectiveGroupConfig:
        cached = self._cache.get(group_id)
        if cached is None:
            cached = self._cache[group_id] = self._resolve(group_id)
        return cached

    def subscribe(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def _resolve(self, group_id: str) -> EffectiveGroupConfig:
        get = self._config.get
        values = group_config.effective_values(self._image().group_configs.get(group_id, {}),
                                               get, group_id)
        values["errors.deadletterqueue.topic.name.prefix"] = get(
            "errors.deadletterqueue.topic.name.prefix")
        values["errors.deadletterqueue.auto.create.topics.enable"] = get(
            "errors.deadletterqueue.auto.create.topics.enable")
        return EffectiveGroupConfig.from_values(values)

    def on_changes(self, changes: list[Change]) -> None:
        changed: set[str | None] = set()
        for change in changes:
            if change.kind == "group_configs" and change.group is not None:
                changed.add(change.group)
            elif change.kind == "broker_configs":
                changed.add(None)
        if not changed:
            return
        if None in changed:
            self._cache.clear()
            changed = {None}
        else:
            for group in changed:
                if group is not None:  # (None was handled above)
                    self._cache.pop(group, None)
        for group in changed:
            for listener in list(self._listeners):
                try:
                    listener(group)
                except Exception:
                    log.exception("group config listener failed")
