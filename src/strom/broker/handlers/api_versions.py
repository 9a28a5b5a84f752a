"""ApiVersions: advertises exactly what the router has handlers for (encoded once, by the router)."""

from __future__ import annotations

from typing import Any

from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec


@handles(ApiKey.API_VERSIONS, 0, 4, raw=True)
def api_versions(broker: Any, ctx: Any, body: memoryview) -> bytes:
    request_codec(ApiKey.API_VERSIONS, ctx.api_version).decode(body)  # malformed: connection closes
    return broker.router.api_versions_reply(ctx.api_version)
