"""Kafka's ``sasl.jaas.config`` values: ``<LoginModule class> <flag> key="value" ... ;``.

On a broker, the JAAS config of a listener's mechanism carries the server's options: PLAIN's
users (``user_<name>="<password>"``), the unsecured OAUTHBEARER validator's options, and the
broker's own credentials for inter-broker SASL (``username``/``password``). Strom reads the
same text so that a Kafka server.properties works unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r'\s*(?:"((?:\\.|[^"\\])*)"|\'((?:\\.|[^\'\\])*)\'|([=;])|([^\s=;"\']+))')


class JaasError(ValueError):
    """A sasl.jaas.config value that does not parse; the message says where."""


@dataclass(frozen=True)
class LoginModule:
    class_name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs: kind is 'word', 'quoted' or the punctuation itself."""
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return out
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise JaasError(f"unexpected character {text[pos]!r} at position {pos}")
        if m.group(1) is not None or m.group(2) is not None:
            raw = m.group(1) if m.group(1) is not None else m.group(2)
            out.append(("quoted", re.sub(r"\\(.)", r"\1", raw)))
        elif m.group(3):
            out.append((m.group(3), m.group(3)))
        else:
            out.append(("word", m.group(4)))
        pos = m.end()


def parse_jaas_config(text: str) -> list[LoginModule]:
    """Every login module of a JAAS config value, in order (Kafka requires exactly one for
    sasl.jaas.config; `single_module` checks that)."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        kind, name = tokens[i]
        if kind != "word":
            raise JaasError(f"expected a login module class name, found {name!r}")
        if i + 1 >= len(tokens) or tokens[i + 1][1].lower() not in FLAGS:
            raise JaasError(f"login module {name} needs a control flag ({', '.join(FLAGS)})")
        flag = tokens[i + 1][1].lower()
        i += 2
        options: dict[str, str] = {}
        while True:
            if i >= len(tokens):
                raise JaasError(f"login module {name} is not terminated by ';'")
            if tokens[i][0] == ";":
                i += 1
                break
            if (i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "="
                    or tokens[i + 2][0] not in ("word", "quoted")):
                raise JaasError(f"login module {name}: expected key=value, found {tokens[i][1]!r}")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        modules.append(LoginModule(name, flag, options))
    return modules


def single_module(text: str, config_name: str) -> LoginModule:
    """The one login module a sasl.jaas.config value must hold."""
    try:
        modules = parse_jaas_config(text)
    except JaasError as e:
        raise JaasError(f"{config_name}: {e}") from None
    if len(modules) != 1:
        raise JaasError(f"{config_name} must contain exactly one login module, found "
                        f"{len(modules)}")
    return modules[0]
