"""ApiVersions: the router answers it (it owns the list of routes and the reply, encoded once
per version); this module checks the request first."""

from __future__ import annotations

import re

from strom.broker.context import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec
from strom.protocol.errors import ErrorCode

# Kafka's pattern for client_software_name and client_software_version (v3+)
_software_name = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?").fullmatch


def check_request(ctx: RequestContext, body: memoryview) -> ErrorCode:
    """NONE, or the error an ApiVersions request is answered with (without the API list).
    A malformed body raises ProtocolError: the connection closes."""
    request, _ = request_codec(ApiKey.API_VERSIONS, ctx.api_version).decode(body)
    if ctx.api_version >= 3 and not (_software_name(request.client_software_name)
                                     and _software_name(request.client_software_version)):
        return ErrorCode.INVALID_REQUEST  # as Kafka's ApiVersionsRequest.isValid (KIP-511)
    return ErrorCode.NONE
