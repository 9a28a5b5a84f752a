"""Routing on paths whose segments encode '/' or '%' (strom.http.paths)."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from strom.http.paths import EncodedSegments, routing_path


@pytest.mark.parametrize(("raw", "routed"), [
    (b"/groups/a%2Fb/x", "/groups/a%2Fb/x"),
    (b"/groups/a%2fb", "/groups/a%2Fb"),
    (b"/groups/100%25%2F%41", "/groups/100%25%2FA"),
    (b"/groups/caf%C3%A9", "/groups/caf\u00e9"),
])
def test_the_routing_path_keeps_slashes_and_percent_signs_encoded(raw: bytes, routed: str) -> None:
    assert routing_path(raw) == routed


def test_a_segment_parameter_is_decoded_once() -> None:
    async def echo(request: Request) -> PlainTextResponse:
        return PlainTextResponse(request.path_params["group"] + "|" + request.url.path)

    app = Starlette(routes=[Route("/groups/{group:segment}/members", echo)],
                    middleware=[Middleware(EncodedSegments)])
    client = TestClient(app)
    for sent, group in (("a%2Fb", "a/b"), ("100%25", "100%"), ("a%252F", "a%2F"),
                        ("plain", "plain")):
        got = client.get(f"/groups/{sent}/members")
        assert got.status_code == 200 and got.text.split("|")[0] == group, (sent, got.text)
    assert client.get("/groups/a/b/members").status_code == 404  # a real slash splits
