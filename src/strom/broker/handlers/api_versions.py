"""ApiVersions: advertises exactly what the router has handlers for."""

from __future__ import annotations

from typing import Any

from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


@handles(ApiKey.API_VERSIONS, 0, 4)
def api_versions(broker: Any, ctx: Any, request: Any) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "api_keys": [
            {"api_key": k, "min_version": lo, "max_version": hi}
            for k, lo, hi in broker.router.api_versions()
        ],
        "throttle_time": 0,
    }
