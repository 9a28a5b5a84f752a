"""Compact JSON text as Confluent's registry (Java, Jackson) writes it.

Schemas are stored and compared as text, so the text must come out as Confluent's does: no
whitespace, non-ASCII characters as they are, and numbers in Java's forms: a float parsed as a
Java double prints as `Double.toString` does (``1.0``, ``1.0E10``), a number kept exactly (a
`Decimal`, as Confluent's JSON Schema mapper keeps them) as `BigDecimal.toString` does (Python's
`Decimal` follows the same rule).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any


def loads(text: str, *, exact: bool = False) -> Any:
    """Parse JSON; with `exact`, non-integral numbers become Decimals (kept as written)."""
    if exact:
        return json.loads(text, parse_float=Decimal, parse_constant=_no_constant)
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"Non-standard token '{name}'")


def dumps(value: Any, *, sort_keys: bool = False) -> str:
    """`value` as compact JSON; `sort_keys` orders every object's keys."""
    out: list[str] = []
    _write(value, out, sort_keys)
    return "".join(out)


def string(text: str) -> str:
    """A JSON string literal."""
    return json.dumps(text, ensure_ascii=False)


def java_double(value: float) -> str:
    """`Double.toString(value)`: shortest digits, scientific below 1e-3 and from 1e7."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign, digits, exponent = Decimal(repr(value)).as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)).rstrip("0") or "0"
    # value = 0.<text> * 10**point
    point = len(digits) + exponent
    prefix = "-" if sign else ""
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            return f"{prefix}0.{'0' * -point}{text}"
        whole = text[:point].ljust(point, "0")
        fraction = text[point:] or "0"
        return f"{prefix}{whole}.{fraction}"
    return f"{prefix}{text[0]}.{text[1:] or '0'}E{point - 1}"


def _write(value: Any, out: list[str], sort_keys: bool) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(string(value))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        text = java_double(value)
        out.append(text if math.isfinite(value) else string(text))
    elif isinstance(value, Decimal):
        out.append(str(value) if value.is_finite() else string(str(value)))
    elif isinstance(value, dict):
        out.append("{")
        items = sorted(value.items()) if sort_keys else value.items()
        for i, (key, item) in enumerate(items):
            if i:
                out.append(",")
            out.append(string(str(key)))
            out.append(":")
            _write(item, out, sort_keys)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, sort_keys)
        out.append("]")
    else:
        raise TypeError(f"not JSON: {type(value).__name__}")
