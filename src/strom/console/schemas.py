"""What the console shows of a topic's schemas: its subjects in the schema registry (Confluent's
REST API, `strom console --registry-url`) and its validation settings (topic configs).

A topic's subjects are the topic-name strategy's ``<topic>-key`` and ``<topic>-value`` (the
record-name strategies name subjects after records, which a topic page cannot know). The
registry is asked over HTTP with the console's timeout; an unreachable registry shows as a
line on the page, never a failed page.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

VALIDATION_CONFIGS = ("confluent.key.schema.validation", "confluent.value.schema.validation",
                      "confluent.key.subject.name.strategy",
                      "confluent.value.subject.name.strategy",
                      "strom.key.schema.validation.mode", "strom.value.schema.validation.mode",
                      "errors.deadletterqueue.topic.name")


@dataclass(frozen=True)
class SubjectView:
    subject: str
    versions: tuple[int, ...]
    latest_id: int
    schema_type: str
    schema: str  # the latest version's text, pretty-printed when it is JSON

    @property
    def latest_version(self) -> int:
        return self.versions[-1]


@dataclass(frozen=True)
class TopicSchemas:
    subjects: tuple[SubjectView, ...]
    validation: dict[str, str]  # the validation configs the topic sets (not defaults)
    error: str | None = None  # why the registry could not be asked


class RegistryReader:
    """Reads subjects from a schema registry (Confluent's REST API)."""

    def __init__(self, url: str, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str) -> Any:
        req = urllib.request.Request(self.url + path, headers={
            "Accept": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            return json.loads(resp.read())

    def subject(self, subject: str) -> SubjectView | None:
        quoted = urllib.parse.quote(subject, safe="")
        try:
            versions = self._get(f"/subjects/{quoted}/versions")
            latest = self._get(f"/subjects/{quoted}/versions/latest")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise
        text = str(latest.get("schema", ""))
        schema_type = str(latest.get("schemaType") or "AVRO")
        if schema_type in ("AVRO", "JSON"):
            with contextlib.suppress(ValueError):  # shown as stored when it is not JSON
                text = json.dumps(json.loads(text), indent=2)
        return SubjectView(subject, tuple(int(v) for v in versions), int(latest["id"]),
                           schema_type, text)

    def for_topic(self, topic: str, configs: dict[str, str]) -> TopicSchemas:
        validation = {k: v for k, v in configs.items() if k in VALIDATION_CONFIGS}
        try:
            found = [self.subject(f"{topic}-{field}") for field in ("key", "value")]
        except (OSError, ValueError, KeyError) as exc:
            return TopicSchemas((), validation, f"cannot read the schema registry at "
                                                f"{self.url}: {exc}")
        return TopicSchemas(tuple(s for s in found if s is not None), validation)
