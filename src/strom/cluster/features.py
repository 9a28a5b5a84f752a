"""Feature levels (KIP-584): what this broker supports and what the cluster has finalized.

Clients read them from ApiVersions (v3+) and switch behaviour on them. The Java producer uses
transaction version 2 (KIP-890 part 2: no AddPartitionsToTxn, EndTxn v5 bumping the epoch)
only when `transaction.version` >= 2 is finalized; the consumer protocol of KIP-848 needs
`group.version` >= 1; Kafka Streams' `group.protocol=streams` (KIP-1071) needs
`streams.version` >= 1; share groups (KIP-932) need `share.version` >= 1. Strom finalizes the
levels of Kafka 4.4's defaults for the features it implements, and advertises none it does not
(no `eligible.leader.replicas.version`). A KRaft cluster keeps its finalized levels in its
metadata log (FeatureLevelRecords: `strom storage format` writes them, UpdateFeatures changes
them, strom.broker.handlers.features); the defaults fill in what the log never named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strom.protocol.primitives import write_uvarint


@dataclass(frozen=True)
class Feature:
    name: str
    min_version: int  # the lowest level this broker supports
    max_version: int  # the highest level this broker supports
    finalized: int  # the level in effect in the cluster


FEATURES: tuple[Feature, ...] = (
    Feature("group.version", 0, 1, 1),
    # Kafka 4.4's level; Strom keeps no KRaft metadata records, this tells tools its vintage
    Feature("metadata.version", 7, 33, 33),
    Feature("share.version", 0, 2, 2),
    Feature("streams.version", 0, 1, 1),
    Feature("transaction.version", 0, 2, 2),
)
# Kafka sends the metadata offset of the last feature change; without one (no KRaft metadata
# log, or one that never changed a level), this.
FINALIZED_EPOCH = 1


def finalized_levels(levels: Mapping[str, int] | None = None) -> dict[str, int]:
    """The finalized level of each feature: `levels` (a KRaft cluster's, from its metadata log)
    over Strom's defaults (a cluster whose log never named a feature, ZooKeeper mode)."""
    out = {f.name: f.finalized for f in FEATURES}
    out.update(levels or {})
    return out


# a KRaft node's quorum feature (KIP-853): supported 0 (static voters) to 1 (dynamic); its level
# is the Raft log's, not a FeatureLevelRecord
KRAFT_VERSION = Feature("kraft.version", 0, 1, 0)


def api_versions_features(version: int, levels: Mapping[str, int] | None = None,
                          epoch: int | None = None,
                          kraft_version: int | None = None) -> dict[str, object]:
    """The feature fields of an ApiVersions response of `version` (tagged fields of v3+):
    `levels` finalized (see `finalized_levels`; a level 0 is not listed), changed last at
    metadata offset `epoch`; on a KRaft node also kraft.version at `kraft_version`.

    v3 lists only features whose lowest supported level is at least 1, as Kafka does: clients
    of that version fail on a range that starts at 0 (KIP-1022)."""
    if version < 3:
        return {}
    features = [*FEATURES, KRAFT_VERSION] if kraft_version is not None else list(FEATURES)
    supported = [f for f in features if version >= 4 or f.min_version >= 1]
    finalized = finalized_levels(levels)
    if kraft_version is not None:
        finalized[KRAFT_VERSION.name] = kraft_version
    return {
        "supported_features": [
            {"name": f.name, "min_version": f.min_version, "max_version": f.max_version}
            for f in supported
        ],
        "finalized_features_epoch": FINALIZED_EPOCH if epoch is None or epoch < 0 else epoch,
        "finalized_features": [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in sorted(finalized.items()) if level > 0
        ],
    }


# UpdateFeatures' upgrade types (v1+; v0's allow_downgrade is SAFE_DOWNGRADE)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def supported_ranges() -> dict[str, tuple[int, int]]:
    """What this software supports, as registrations carry it: {name: (min, max)}."""
    return {f.name: (f.min_version, f.max_version) for f in (*FEATURES, KRAFT_VERSION)}


def _range_text(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"


def feature_update_refused(name: str, level: int, upgrade_type: int,
                           current: Mapping[str, int],
                           supporters: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
                           ) -> str | None:
    """Why a KRaft controller refuses to finalize `name` at `level` (INVALID_UPDATE_VERSION),
    as Kafka's controller words it; None when it may. `current`: the finalized levels;
    `supporters`: the registered brokers and controllers ("Broker 4", "Controller 1") and the
    levels each supports: every one must support `level` (an old node still registered would
    fail on it)."""
    feature = next((f for f in FEATURES if f.name == name), None)
    if feature is None:
        return (f"Invalid update version {level} for feature {name}. The controller does not "
                "support the given feature.")
    if not (level == 0 and name != "metadata.version") and \
            not feature.min_version <= level <= feature.max_version:
        return (f"Invalid update version {level} for feature {name}. Strom supports versions "
                f"{feature.min_version}-{feature.max_version}.")
    now = current.get(name, 0)
    if level < now:
        if upgrade_type == UPGRADE:
            return (f"Invalid update version {level} for feature {name}. Can't downgrade the "
                    "version of this feature without setting the upgrade type to either safe "
                    "or unsafe downgrade.")
        if name == "metadata.version":
            return (f"Invalid metadata.version {level}. Refusing to downgrade the metadata "
                    f"version from {now}: Strom supports no metadata.version downgrade.")
    for who, ranges in (supporters or {}).items():
        lo, hi = ranges.get(name, (0, 0))
        if not lo <= level <= hi:
            why = ("does not support this feature." if hi == 0
                   else f"only supports versions {_range_text(lo, hi)}")
            return f"Invalid update version {level} for feature {name}. {who} {why}"
    return None


def finalized_level(name: str, levels: Mapping[str, int] | None = None) -> int:
    """The finalized level of a feature (0 when Strom does not have it)."""
    return finalized_levels(levels).get(name, 0)


_FEATURE_LEVEL_API_KEY = 12  # Kafka's FeatureLevelRecord


def feature_level_record(name: str, level: int) -> bytes:
    """Kafka's FeatureLevelRecord v0 as a metadata record value: frame version 1, api key, api
    version, then name (compact string), level (int16) and no tagged fields."""
    raw = name.encode("utf-8")
    return (write_uvarint(1) + write_uvarint(_FEATURE_LEVEL_API_KEY) + write_uvarint(0)
            + write_uvarint(len(raw) + 1) + raw + level.to_bytes(2, "big", signed=True)
            + write_uvarint(0))


def parse_feature_level_record(value: bytes) -> tuple[str, int]:
    """The inverse of `feature_level_record` (the controller reads the levels of the bootstrap
    snapshot with it); ValueError otherwise."""
    if len(value) < 6 or value[:3] != b"\x01\x0c\x00":
        raise ValueError(f"not a FeatureLevelRecord v0: {value.hex()}")
    n = value[3] - 1  # names are short: a one-byte varint
    name = value[4:4 + n].decode("utf-8")
    level = int.from_bytes(value[4 + n:6 + n], "big", signed=True)
    return name, level
