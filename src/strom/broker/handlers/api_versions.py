"""ApiVersions: advertises exactly what the router has handlers for.

Every client opens each connection with this request, so the reply is encoded once per
version and reused: the routes never change after start-up.
"""

from __future__ import annotations

from typing import Any

from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec, response_codec
from strom.protocol.errors import ErrorCode


@handles(ApiKey.API_VERSIONS, 0, 4, raw=True)
def api_versions(broker: Any, ctx: Any, body: memoryview) -> bytes:
    version = ctx.api_version
    request_codec(ApiKey.API_VERSIONS, version).decode(body)  # a malformed body closes the connection
    replies: dict[int, bytes] = broker.router.cached_replies
    reply = replies.get(version)
    if reply is None:
        reply = replies[version] = response_codec(ApiKey.API_VERSIONS, version).encode({
            "error_code": ErrorCode.NONE,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, lo, hi in broker.router.api_versions()
            ],
            "throttle_time": 0,
        })
    return reply
