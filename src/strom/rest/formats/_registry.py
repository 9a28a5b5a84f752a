"""The schema registry as the HTTP API's embedded formats ask it (Confluent's REST API over
HTTP, with the user's basic credentials), and the answers kept.

Every call runs on a worker thread (urllib blocks); concurrent requests for one key share one
call (a stream of records names the same schema many times at once). What cannot change is kept
for the process's life: a schema by id, a subject's numbered version, the id and version a schema
has under a subject. A subject's latest version is kept `LATEST_TTL_S` only, so a new version
is picked up within that time. Parsed schemas are shared by all users (keyed by their content);
ids and subjects are looked up for each user, as the registry's access rules may differ.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from strom.rest.formats._codecs import Codec, codec_for

REGISTRY_TIMEOUT_S = 15.0
LATEST_TTL_S = 1.0
MEMO_LIMIT = 4096
CODEC_LIMIT = 1024
MAX_REFERENCE_DEPTH = 32
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"

V = TypeVar("V")

# (method, path, JSON body or None) -> the JSON answer; raises RegistryCallError
Transport = Callable[[str, str, Any], Any]


class RegistryCallError(Exception):
    """The registry's error answer (`status` 0: it could not be reached)."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def forbidden(self) -> bool:
        return self.status == 403 or self.error_code == 40301


def http_transport(url: str, auth: tuple[str, str] | None = None,
                   tls: ssl.SSLContext | None = None) -> Transport:
    """Calls to the registry at `url` (blocking: run them on a thread)."""
    base = url.rstrip("/")
    headers = {"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE}
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"

    def call(method: str, path: str, body: Any) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=REGISTRY_TIMEOUT_S,
                                        context=tls) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            raise _answer_error(exc.code, exc.read()) from None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise RegistryCallError(0, 50003, f"the schema registry at {base} cannot be "
                                              f"reached: {reason}") from None
        try:
            return json.loads(text) if text.strip() else None
        except ValueError:
            raise RegistryCallError(0, 50002, f"the schema registry at {base} answered "
                                              "something that is not JSON") from None

    return call


def _answer_error(status: int, text: bytes) -> RegistryCallError:
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        code = body.get("error_code")
        return RegistryCallError(status, code if isinstance(code, int) else status,
                                 " ".join(body["message"].split()))
    shown = " ".join(text.decode(errors="replace").split())[:200]
    return RegistryCallError(status, status, shown or f"HTTP {status}")


class Memo(Generic[V]):
    """Answers by key: one call at a time per key, successes kept (`ttl` seconds, or for
    good), failures not."""

    def __init__(self, ttl: float | None = None, limit: int = MEMO_LIMIT) -> None:
        self.ttl = ttl
        self.limit = limit
        self._done: dict[Hashable, tuple[float, V]] = {}
        self._pending: dict[Hashable, asyncio.Future[V]] = {}

    def put(self, key: Hashable, value: V) -> None:
        if len(self._done) >= self.limit:
            self._done.clear()
        self._done[key] = (time.monotonic(), value)

    async def get(self, key: Hashable, make: Callable[[], Awaitable[V]]) -> V:
        hit = self._done.get(key)
        if hit is not None and (self.ttl is None or time.monotonic() - hit[0] < self.ttl):
            return hit[1]
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(make())
            self._pending[key] = pending
            pending.add_done_callback(lambda done: self._settle(key, done))
        return await asyncio.shield(pending)

    def _settle(self, key: Hashable, done: asyncio.Future[V]) -> None:
        if self._pending.get(key) is done:
            del self._pending[key]
        if not done.cancelled() and done.exception() is None:
            self.put(key, done.result())


_codecs: dict[tuple[str, str, tuple[tuple[str, str], ...]], Codec] = {}
_codecs_lock = threading.Lock()


def shared_codec(schema_type: str, text: str, references: dict[str, str]) -> Codec:
    """The codec of a schema's content, parsed once per process (blocking: parsing a Protobuf
    schema compiles it). SchemaError when the registry's parser refuses it."""
    key = (schema_type, text, tuple(references.items()))
    with _codecs_lock:
        found = _codecs.get(key)
    if found is None:
        found = codec_for(schema_type, text, references)
        with _codecs_lock:
            if len(_codecs) >= CODEC_LIMIT:
                _codecs.clear()
            found = _codecs.setdefault(key, found)
    return found


@dataclass(frozen=True)
class Found:
    """A registered schema: its id, content (as the registry answers it) and codec."""

    id: int
    schema_type: str  # AVRO, JSON or PROTOBUF
    text: str
    references: list[dict[str, Any]]  # the registry's {name, subject, version} items
    codec: Codec

    def body(self) -> dict[str, Any]:
        """The schema as a lookup or registration sends it."""
        out: dict[str, Any] = {"schema": self.text, "schemaType": self.schema_type}
        if self.references:
            out["references"] = self.references
        return out


def subject_path(subject: str) -> str:
    return "/subjects/" + urllib.parse.quote(subject, safe="")


class RegistryClient:
    """One user's view of the registry (their credentials, their answers kept)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._ids: Memo[Found] = Memo()
        self._versions: Memo[Any] = Memo()
        self._latest: Memo[Any] = Memo(ttl=LATEST_TTL_S)
        self._under: Memo[tuple[int, int]] = Memo()

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        return await asyncio.to_thread(self.transport, method, path, body)

    async def by_id(self, sid: int) -> Found:
        """GET /schemas/ids/{id}, parsed."""

        async def fetch() -> Found:
            answer = await self.call("GET", f"/schemas/ids/{sid}")
            return await self._found(sid, answer)

        return await self._ids.get(sid, fetch)

    async def at_version(self, subject: str, version: int | str) -> tuple[Found, int]:
        """GET /subjects/{subject}/versions/{version} ("latest" kept `LATEST_TTL_S`): the
        schema and its version number."""
        answer = await self._version(subject, version)
        sid = answer.get("id") if isinstance(answer, dict) else None
        number = answer.get("version") if isinstance(answer, dict) else None
        if not isinstance(sid, int) or not isinstance(number, int):
            raise RegistryCallError(0, 50002, f"the registry's answer for {subject} version "
                                              f"{version} has no schema id or version")
        return await self._ids.get(sid, lambda: self._found(sid, answer)), number

    async def version_of(self, subject: str, found: Found) -> int:
        """The version `found` has under `subject` (POST /subjects/{subject}, a lookup)."""
        _, version = await self._under.get(
            (subject, found.id), lambda: self._lookup(subject, found.body()))
        return version

    async def register(self, subject: str, schema_type: str, text: str) -> tuple[int, int]:
        """The id and version of a schema's text under `subject`: looked up, else
        registered (POST /subjects/{subject}/versions)."""
        body = {"schema": text, "schemaType": schema_type}

        async def lookup_or_register() -> tuple[int, int]:
            try:
                return await self._lookup(subject, body)
            except RegistryCallError as exc:
                if not exc.not_found:
                    raise
            answer = await self.call("POST", subject_path(subject) + "/versions", body)
            sid = answer.get("id") if isinstance(answer, dict) else None
            version = answer.get("version") if isinstance(answer, dict) else None
            if isinstance(sid, int) and isinstance(version, int):
                return sid, version
            return await self._lookup(subject, body)

        return await self._under.get((subject, schema_type, text), lookup_or_register)

    def remember(self, found: Found) -> None:
        """A schema known by its id (parsed for a registration)."""
        self._ids.put(found.id, found)

    async def _lookup(self, subject: str, body: dict[str, Any]) -> tuple[int, int]:
        answer = await self.call("POST", subject_path(subject), body)
        sid = answer.get("id") if isinstance(answer, dict) else None
        version = answer.get("version") if isinstance(answer, dict) else None
        if not isinstance(sid, int) or not isinstance(version, int):
            raise RegistryCallError(0, 50002, f"the registry's lookup under {subject} "
                                              "answered no id and version")
        return sid, version

    async def _version(self, subject: str, version: int | str) -> Any:
        memo = self._latest if version in ("latest", -1) else self._versions
        return await memo.get((subject, version), lambda: self.call(
            "GET", f"{subject_path(subject)}/versions/{version}"))

    async def _found(self, sid: int, answer: Any) -> Found:
        if not isinstance(answer, dict) or not isinstance(answer.get("schema"), str):
            raise RegistryCallError(0, 50002, f"the registry's answer for schema {sid} has no "
                                              "schema")
        schema_type = answer.get("schemaType") or "AVRO"
        refs = answer.get("references") or []
        texts: dict[str, str] = {}
        await self._resolve(refs, texts, 0)
        codec = await asyncio.to_thread(shared_codec, str(schema_type), answer["schema"], texts)
        return Found(sid, str(schema_type), answer["schema"], list(refs), codec)

    async def _resolve(self, refs: Any, texts: dict[str, str], depth: int) -> None:
        """Each reference's text by its name, those it references first."""
        if depth > MAX_REFERENCE_DEPTH:
            raise RegistryCallError(0, 42201, "the schema's references nest too deeply")
        for ref in refs if isinstance(refs, list) else ():
            if not isinstance(ref, dict) or ref.get("name") in texts:
                continue
            answer = await self._version(str(ref.get("subject")), ref.get("version", "latest"))
            if not isinstance(answer, dict) or not isinstance(answer.get("schema"), str):
                raise RegistryCallError(0, 50002, f"reference {ref.get('name')} has no schema")
            await self._resolve(answer.get("references") or [], texts, depth + 1)
            texts[str(ref["name"])] = answer["schema"]
