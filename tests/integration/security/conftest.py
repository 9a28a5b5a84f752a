"""A broker with every kind of listener, and the certificates and users the tests need.

Listeners: PLAINTEXT (readiness and admin), SSL (server authentication only), MTLS (SSL with
``ssl.client.auth=required`` and a principal mapping rule), SASL_PLAINTEXT and SASL_SSL with
PLAIN (users in the JAAS config) and SCRAM-SHA-256/512 (users added through
AlterUserScramCredentials by the fixture).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from ..broker import HOST, free_port
from .certs import CertificateAuthority, Issued

PLAIN_USERS = {"alice": "alice-secret", "admin": "admin-secret"}
SCRAM_USERS = {"carol": "carol-secret", "dave": "dave-secret"}
JAAS_PLAIN = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")


@dataclass
class Secured:
    broker: object
    ca: CertificateAuthority
    other_ca: CertificateAuthority
    server: Issued
    client: Issued  # CN=carol-client,OU=apps,O=Strom: principal "carol-client" on MTLS
    stranger: Issued  # signed by another CA
    ports: dict[str, int]

    def bootstrap(self, listener: str) -> str:
        return f"{HOST}:{self.ports[listener]}"

    def conf(self, listener: str, **extra: str) -> dict[str, str]:
        """confluent-kafka settings for a listener (add sasl.* for the SASL ones)."""
        protocol = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL",
                    "SASL_PLAINTEXT": "SASL_PLAINTEXT", "SASL_SSL": "SASL_SSL"}[listener]
        conf = {"bootstrap.servers": self.bootstrap(listener), "security.protocol": protocol}
        if protocol.endswith("SSL"):
            conf["ssl.ca.location"] = str(self.ca.path)
        conf.update(extra)
        return conf


def add_scram_user(bootstrap: str, user: str, password: str, mechanisms=None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for mechanism in mechanisms or (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            user, ScramCredentialInfo(mechanism, 4096), password.encode())])
        for future in futures.values():
            future.result(timeout=30)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> tuple[CertificateAuthority, CertificateAuthority, Issued, Issued,
                                     Issued]:
    base: Path = tmp_path_factory.mktemp("certs")
    ca = CertificateAuthority(base / "ca")
    other = CertificateAuthority(base / "other", name="Other CA")
    server = ca.issue("broker", server=True, password="key-pass", CN="localhost", O="Strom")
    client = ca.issue("carol", CN="carol-client", OU="apps", O="Strom")
    stranger = other.issue("mallory", CN="mallory", O="Elsewhere")
    return ca, other, server, client, stranger


@pytest.fixture(scope="module")
def secured(make_module_broker, certs) -> Secured:
    ca, other, server, client, stranger = certs
    ports = {name: free_port() for name in ("SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")}
    listeners = ",".join([f"PLAINTEXT://{HOST}:{{port}}"]
                         + [f"{name}://{HOST}:{port}" for name, port in ports.items()])
    broker = make_module_broker({
        "listeners": listeners,
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(server.both),
        "ssl.key.password": "key-pass",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.path),
        "listener.name.mtls.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS_PLAIN,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS_PLAIN,
    })
    ports["PLAINTEXT"] = broker.port
    for user, password in SCRAM_USERS.items():
        add_scram_user(broker.bootstrap, user, password)
    return Secured(broker, ca, other, server, client, stranger, ports)
