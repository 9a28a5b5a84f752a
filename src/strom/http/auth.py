"""HTTP basic authentication for Strom's HTTP listeners, against the broker's own users.

An ASGI wrapper: a request without valid ``Authorization: Basic`` credentials is answered 401
with ``WWW-Authenticate`` and a JSON error body, before the app sees it; an authenticated one
reaches the app with the user name in ``scope["state"]["user"]``. Who the users are is the
caller's `PasswordCheck` (the broker checks SCRAM credentials and SASL/PLAIN users). A check
that passed is remembered for `CACHE_S` (SCRAM's key derivation costs milliseconds), keyed by a
hash of the credentials, never the password itself.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

PasswordCheck = Callable[[str, str], bool]
CACHE_S = 60.0
MAX_CACHED = 10_000


class BasicAuth:
    def __init__(self, app: ASGIApp, check: PasswordCheck, *, realm: str = "Strom",
                 media_type: str = "application/json") -> None:
        self.app = app
        self.check = check
        self.realm = realm
        self.media_type = media_type
        self._passed: dict[bytes, float] = {}

    def _user(self, scope: Scope) -> str | None:
        header = next((v for k, v in scope.get("headers", []) if k == b"authorization"), None)
        if header is None or header[:6].lower() != b"basic ":
            return None
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not user:
            return None
        key = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        now = time.monotonic()
        if self._passed.get(key, 0.0) > now:
            return user
        if not self.check(user, password):
            return None
        if len(self._passed) >= MAX_CACHED:
            self._passed.clear()
        self._passed[key] = now + CACHE_S
        return user

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = self._user(scope)
        if user is None:
            body = json.dumps({"error_code": 401, "message": "Unauthorized"}).encode()
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", self.media_type.encode()),
                (b"www-authenticate", f'Basic realm="{self.realm}"'.encode()),
                (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        state: dict[str, Any] = scope.setdefault("state", {})
        state["user"] = user
        await self.app(scope, receive, send)
