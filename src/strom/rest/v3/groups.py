"""(to be written)"""

from __future__ import annotations

from typing import Any

from starlette.routing import BaseRoute

from strom.rest.context import RestContext


def routes(ctx: RestContext) -> list[BaseRoute]:
    return []


PATHS: dict[str, Any] = {}
SCHEMAS: dict[str, Any] = {}
