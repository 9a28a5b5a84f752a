"""Who a connection is: Kafka principals, and the mapping of TLS certificate names to them.

Kafka names every client ``User:<name>``: ``User:ANONYMOUS`` on PLAINTEXT and on TLS without
a client certificate, the SASL identity after SASL authentication, and the certificate's
subject (as RFC 2253 text, rewritten by ``ssl.principal.mapping.rules``) with TLS client
authentication. ACLs, quotas and logs all speak of these strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def user(cls, name: str) -> KafkaPrincipal:
        return cls(USER_TYPE, name)

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """'User:alice' -> KafkaPrincipal('User', 'alice'), as Kafka's SecurityUtils.parseKafkaPrincipal."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"expected a principal of the form Type:name, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal.user("ANONYMOUS")


class NoMatchingRule(ValueError):
    """No rule of ssl.principal.mapping.rules matched a certificate's name."""


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT (the name as it is)
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        mapped = self.pattern.sub(self.replacement, name)
        if self.case == "L":
            return mapped.lower()
        if self.case == "U":
            return mapped.upper()
        return mapped


# Kafka's rule grammar (SslPrincipalMapper): RULE:pattern/replacement/[LU], or DEFAULT; rules
# are separated by commas, which may also appear inside a rule's pattern.
_RULE = re.compile(r"\s*(?:RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)|(DEFAULT))\s*(?:,|$)")


def _java_replacement(text: str) -> str:
    """A java.util.regex replacement ($1, \\$) as a Python one (\\g<1>, $)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append("\\\\" if text[i + 1] == "\\" else text[i + 1])
            i += 2
        elif c == "$" and i + 1 < len(text) and text[i + 1].isdigit():
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            out.append(f"\\g<{text[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: the first rule whose pattern matches the whole
    distinguished name rewrites it; no matching rule fails the connection's authentication."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"Invalid rule: {text[pos:]}")
            if m.group(4):
                self.rules.append(_Rule(None))
            else:
                try:
                    pattern = re.compile(m.group(1))
                except re.error as e:
                    raise ValueError(f"Invalid rule: {m.group(0).strip()} ({e})") from None
                self.rules.append(_Rule(pattern, _java_replacement(m.group(2)), m.group(3)))
            pos = m.end()

    def principal_name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules {self.rules}")
