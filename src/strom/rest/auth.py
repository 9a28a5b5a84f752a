"""HTTP basic credentials checked by the broker itself: a SASL exchange (SCRAM or PLAIN, as the
broker's listener enables them) on a short-lived connection. The mechanism that worked is
remembered, so the user's Kafka clients authenticate the same way."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence

from scramp import ScramClient, ScramException

from strom.cli.common import CliError
from strom.cli.wire import Connection

log = logging.getLogger("strom.rest.auth")

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
PREFERRED = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
TIMEOUT_S = 5.0


class SaslCheck:
    def __init__(self, bootstrap: str, mechanisms: Sequence[str],
                 tls: ssl.SSLContext | None = None) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.tls = tls
        self.mechanisms = [m for m in PREFERRED if m in mechanisms]
        self._mechanism: dict[str, str] = {}

    def mechanism_of(self, user: str) -> str | None:
        return self._mechanism.get(user)

    def __call__(self, user: str, password: str) -> bool:
        for mechanism in self.mechanisms:
            try:
                if self._authenticate(mechanism, user, password):
                    self._mechanism[user] = mechanism
                    return True
            except (CliError, ScramException, OSError) as exc:
                log.debug("SASL %s check of %s failed: %s", mechanism, user, exc)
        return False

    def _authenticate(self, mechanism: str, user: str, password: str) -> bool:
        conn = Connection(self.host, self.port, TIMEOUT_S, ssl_context=self.tls)
        try:
            if conn.call(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code:
                return False
            if mechanism == "PLAIN":
                token = b"\0" + user.encode() + b"\0" + password.encode()
                return conn.call(SASL_AUTHENTICATE, 2, {"auth_bytes": token}).error_code == 0
            client = ScramClient([mechanism], user, password)
            first = conn.call(SASL_AUTHENTICATE, 2,
                              {"auth_bytes": client.get_client_first().encode()})
            if first.error_code:
                return False
            client.set_server_first(bytes(first.auth_bytes).decode())
            final = conn.call(SASL_AUTHENTICATE, 2,
                              {"auth_bytes": client.get_client_final().encode()})
            if final.error_code:
                return False
            client.set_server_final(bytes(final.auth_bytes).decode())
            return True
        finally:
            conn.close()
