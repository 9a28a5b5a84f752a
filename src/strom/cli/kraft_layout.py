"""What a KRaft node's formatted log dirs hold, for `strom storage format` and the migration
from ZooKeeper (`strom.cli.zk_migration`): ``meta.properties`` and the feature levels of the
bootstrap snapshot (metadata.version names and Kafka 4.4's defaults)."""

from __future__ import annotations

from pathlib import Path

from strom.cli.common import CliError
from strom.cluster.features import FEATURES
from strom.cluster.zk.znodes import new_topic_id
from strom.storage.checkpoints import topic_id_to_str

META_PROPERTIES = "meta.properties"

# metadata.version names in level order, from level 7 (3.3-IV3, the first KRaft production
# level) to Kafka 4.4's latest, 4.4-IV2 = 33.
_MV_FIRST_LEVEL = 7
MV_NAMES: tuple[str, ...] = (
    "3.3-IV3", "3.4-IV0", "3.5-IV0", "3.5-IV1", "3.5-IV2", "3.6-IV0", "3.6-IV1", "3.6-IV2",
    "3.7-IV0", "3.7-IV1", "3.7-IV2", "3.7-IV3", "3.7-IV4", "3.8-IV0", "3.9-IV0", "4.0-IV0",
    "4.0-IV1", "4.0-IV2", "4.0-IV3", "4.1-IV0", "4.1-IV1", "4.2-IV0", "4.2-IV1", "4.3-IV0",
    "4.4-IV0", "4.4-IV1", "4.4-IV2",
)
DEFAULT_MV_LEVEL = _MV_FIRST_LEVEL + len(MV_NAMES) - 1

# The level Kafka 4.4 bootstraps each feature at, by metadata.version: (from MV level, level),
# highest first (measured with kafka-storage format -r <each version>).
_FEATURE_DEFAULTS: dict[str, tuple[tuple[int, int], ...]] = {
    "group.version": ((22, 1),),
    "share.version": ((31, 2), (28, 1)),
    "streams.version": ((29, 1),),
    "transaction.version": ((24, 2),),
}
KRAFT_VERSION = "kraft.version"
METADATA_VERSION = "metadata.version"
MAX_LEVELS = {f.name: f.max_version for f in FEATURES if f.name != METADATA_VERSION}
SUPPORTED_FEATURES = tuple(sorted([*MAX_LEVELS, KRAFT_VERSION]))



def mv_name(level: int) -> str:
    return MV_NAMES[level - _MV_FIRST_LEVEL]


def metadata_version_level(text: str) -> int:
    """A release version (``3.9``, ``4.4-IV2``) as its metadata.version level; a bare release
    is its last level, as in Kafka."""
    text = text.strip()
    if text in MV_NAMES:
        return MV_NAMES.index(text) + _MV_FIRST_LEVEL
    same_release = [i for i, name in enumerate(MV_NAMES) if name.split("-")[0] == text]
    if same_release:
        return same_release[-1] + _MV_FIRST_LEVEL
    raise CliError(f"Unknown metadata.version '{text}'. Supported metadata.version are: "
                   f"{', '.join(MV_NAMES)}")


def default_feature_levels(mv_level: int) -> dict[str, int]:
    """The features (other than metadata.version and kraft.version) at their bootstrap level
    for a metadata.version, as Kafka 4.4 picks them."""
    out = {}
    for name, steps in _FEATURE_DEFAULTS.items():
        out[name] = next((level for since, level in steps if mv_level >= since), 0)
    return out


def random_directory_id() -> str:
    """A new base64url UUID (neither reserved nor starting with '-'), like Kafka's
    ``Uuid.randomUuid().toString()``."""
    return topic_id_to_str(new_topic_id())


def read_meta(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {path}: {e}") from None
    return {k.strip(): v.strip() for k, _, v in
            (line.partition("=") for line in text.splitlines())
            if _ and not k.lstrip().startswith(("#", "!"))}
