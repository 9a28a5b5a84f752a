"""Config definitions: one `ConfigDef` per Kafka config name, with type, default and validator.

The same machinery serves broker configs (server.properties, dynamic broker configs) and topic
configs, so DescribeConfigs can report types, sources, synonyms and documentation uniformly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class ConfigType(IntEnum):
    """Kafka's DescribeConfigs config types (v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(IntEnum):
    """Where a config value came from (DescribeConfigs v1+)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigError(ValueError):
    """A config value is invalid or its name is unknown; the message says which and why."""


Validator = Callable[[str, Any], None]


@dataclass(frozen=True)
class ConfigDef:
    """One Kafka config. `implemented=False` marks a name Strom accepts (Kafka users copy whole
    config files and tools set topic configs) but does not act on; the broker names such configs
    in a WARN at start-up and docs/configuration.md lists them, both from this flag."""

    name: str
    type: ConfigType
    default: Any
    doc: str = ""
    validator: Validator | None = None
    sensitive: bool = False
    read_only: bool = False
    implemented: bool = True

    def parse(self, raw: Any) -> Any:
        """Turn a string (or an already typed value) into this config's type, then validate it."""
        value = _coerce(self, raw)
        if self.validator is not None and value is not None:
            self.validator(self.name, value)
        return value

    def render(self, value: Any) -> str | None:
        """The string form Kafka shows in DescribeConfigs."""
        if value is None:
            return None
        if self.type == ConfigType.BOOLEAN:
            return "true" if value else "false"
        if self.type == ConfigType.LIST:
            return ",".join(value)
        return str(value)


def _coerce(d: ConfigDef, raw: Any) -> Any:
    if raw is None:
        return None
    t = d.type
    try:
        if t == ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            s = str(raw).strip().lower()
            if s in ("true", "false"):
                return s == "true"
            raise ValueError
        if t in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            v = raw if isinstance(raw, int) and not isinstance(raw, bool) else int(str(raw).strip())
            lo, hi = {
                ConfigType.INT: (-INT_MAX - 1, INT_MAX),
                ConfigType.SHORT: (-32768, 32767),
                ConfigType.LONG: (-LONG_MAX - 1, LONG_MAX),
            }[t]
            if not lo <= v <= hi:
                raise ValueError
            return v
        if t == ConfigType.DOUBLE:
            return float(raw)
        if t == ConfigType.LIST:
            if isinstance(raw, (list, tuple)):
                return [str(x).strip() for x in raw if str(x).strip()]
            return [p.strip() for p in str(raw).split(",") if p.strip()]
        return str(raw).strip()
    except ValueError:  # Kafka's ConfigDef.parseType texts
        why = ("Expected value to be either true or false" if t == ConfigType.BOOLEAN
               else f"Not a number of type {t.name}")
        raise ConfigError(f"Invalid value {raw} for configuration {d.name}: {why}") from None


def at_least(minimum: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if value < minimum:
            raise ConfigError(f"Invalid value {value} for configuration {name}: must be at least {minimum}")

    return check


def between(lo: float, hi: float) -> Validator:
    def check(name: str, value: Any) -> None:
        if not lo <= value <= hi:
            raise ConfigError(f"Invalid value {value} for configuration {name}: must be between {lo} and {hi}")

    return check


def one_of(*choices: str, case_insensitive: bool = False) -> Validator:
    allowed = {c.lower() for c in choices} if case_insensitive else set(choices)

    def check(name: str, value: Any) -> None:
        items = value if isinstance(value, list) else [value]
        for item in items:
            key = item.lower() if case_insensitive else item
            if key not in allowed:
                raise ConfigError(
                    f"Invalid value {item} for configuration {name}: String must be one of: "
                    + ", ".join(choices)
                )

    return check


@dataclass
class ConfigRegistry:
    """A named set of ConfigDefs."""

    defs: dict[str, ConfigDef] = field(default_factory=dict)

    def add(self, *defs: ConfigDef) -> None:
        for d in defs:
            self.defs[d.name] = d

    def __contains__(self, name: str) -> bool:
        return name in self.defs

    def __getitem__(self, name: str) -> ConfigDef:
        return self.defs[name]

    def names(self) -> Iterable[str]:
        return self.defs.keys()

    def unimplemented(self) -> list[ConfigDef]:
        """The configs accepted without effect, in definition order."""
        return [d for d in self.defs.values() if not d.implemented]

    def parse(self, name: str, raw: Any) -> Any:
        d = self.defs.get(name)
        if d is None:
            raise ConfigError(f"Unknown configuration '{name}'")
        return d.parse(raw)
