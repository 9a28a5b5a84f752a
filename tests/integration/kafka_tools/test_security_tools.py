"""Kafka's own tools and Java client against a secured Strom broker: SCRAM users managed with
kafka-configs (--entity-type users), then the console producer and consumer over SASL_SSL with
a client config file as a Kafka user writes it (JAAS line, PEM trust store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..broker import HOST, free_port
from ..security.certs import CertificateAuthority
from .tools import unique

pytestmark = pytest.mark.timeout(240)

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.fixture(scope="module")
def sasl_ssl(make_module_broker, tmp_path_factory):
    base: Path = tmp_path_factory.mktemp("tool-certs")
    ca = CertificateAuthority(base)
    server = ca.issue("broker", server=True, CN="localhost")
    port, plain_port = free_port(), free_port()
    broker = make_module_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_SSL://{HOST}:{port},"
                     f"SASL_PLAINTEXT://{HOST}:{plain_port}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(server.both),
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required user_alice="alice-secret";',
    })
    broker.plain_bootstrap = f"{HOST}:{plain_port}"
    return broker, f"{HOST}:{port}", ca


def _client_config(path: Path, ca: CertificateAuthority, user: str, password: str,
                   mechanism: str = "SCRAM-SHA-256") -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\n"
        f'sasl.jaas.config={SCRAM_MODULE} required username="{user}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={ca.path}\n")
    return path


def test_scram_users_with_kafka_configs_then_console_clients(kafka_tools, sasl_ssl, tmp_path):
    broker, secured_bootstrap, ca = sasl_ssl
    user = unique("erin")

    def configs(*args: str, code: int = 0):
        return kafka_tools.run("kafka-configs", "--bootstrap-server", broker.bootstrap,
                               "--entity-type", "users", "--entity-name", user, *args, code=code)

    # Kafka 4.4's controller refuses one user twice in a request, even for two mechanisms
    # (checked against Kafka 4.4): one mechanism per command
    both = configs("--alter", "--add-config", "SCRAM-SHA-256=[password=a],SCRAM-SHA-512=[password=a]",
                   code=1)
    assert "DuplicateResourceException: A user credential cannot be altered twice in the same " \
           "request" in both.stdout + both.stderr
    done = configs("--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=erin-secret]")
    assert f"Completed updating config for user {user}." in done.stdout
    configs("--alter", "--add-config", "SCRAM-SHA-512=[password=erin-secret]")
    described = configs("--describe").stdout
    prefix = f"SCRAM credential configs for user-principal '{user}' are "
    assert prefix in described
    listed = described.split(prefix, 1)[1].split("\n", 1)[0].split(", ")
    assert sorted(listed) == ["SCRAM-SHA-256=iterations=8192", "SCRAM-SHA-512=iterations=4096"]

    topic = unique("secured")
    good = _client_config(tmp_path / "good.properties", ca, user, "erin-secret")
    kafka_tools.run("kafka-console-producer", "--bootstrap-server", secured_bootstrap,
                    "--topic", topic, "--command-config", str(good), input="one\ntwo\nthree\n")
    consumed = kafka_tools.run(
        "kafka-console-consumer", "--bootstrap-server", secured_bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", "3", "--timeout-ms", "30000",
        "--command-config", str(_client_config(tmp_path / "c.properties", ca, user,
                                               "erin-secret", "SCRAM-SHA-512")))
    assert consumed.stdout.split() == ["one", "two", "three"]

    wrong = _client_config(tmp_path / "wrong.properties", ca, user, "not-it")
    failed = kafka_tools.run("kafka-topics", "--bootstrap-server", secured_bootstrap, "--list",
                             "--command-config", str(wrong), code=None, timeout=90)
    assert failed.returncode != 0
    assert ("Authentication failed during authentication due to invalid credentials with SASL "
            "mechanism SCRAM-SHA-256") in failed.stdout + failed.stderr

    configs("--alter", "--delete-config", "SCRAM-SHA-512")
    assert "SCRAM-SHA-512" not in configs("--describe").stdout


@pytest.mark.parametrize(("mechanism", "jaas"), [
    ("PLAIN", f'{PLAIN_MODULE} required username="alice" password="alice-secret";'),
    ("OAUTHBEARER", f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="alice";'),
])
def test_java_client_with_plain_and_oauthbearer(kafka_tools, sasl_ssl, tmp_path, mechanism, jaas):
    broker, _, _ = sasl_ssl
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                      f"sasl.jaas.config={jaas}\n")
    topic = unique(mechanism.lower())
    kafka_tools.run("kafka-console-producer", "--bootstrap-server", broker.plain_bootstrap,
                    "--topic", topic, "--command-config", str(config), input="a\nb\n")
    consumed = kafka_tools.run(
        "kafka-console-consumer", "--bootstrap-server", broker.plain_bootstrap, "--topic", topic,
        "--from-beginning", "--max-messages", "2", "--timeout-ms", "30000",
        "--command-config", str(config))
    assert consumed.stdout.split() == ["a", "b"]


def test_kafka_acls_tool(kafka_tools, make_broker, tmp_path):
    port = free_port()
    broker = make_broker({
        "listeners": f"PLAINTEXT://{HOST}:{{port}},SASL_PLAINTEXT://{HOST}:{port}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config":
            f'{PLAIN_MODULE} required user_admin="admin-pw" user_bob="bob-pw";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
    })
    admin = tmp_path / "admin.properties"
    admin.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     f'sasl.jaas.config={PLAIN_MODULE} required username="admin" '
                     'password="admin-pw";\n')
    topic = unique("acl")

    def acls(*args: str, code: int = 0):
        return kafka_tools.run("kafka-acls", "--bootstrap-server", f"{HOST}:{port}",
                               "--command-config", str(admin), *args, code=code)

    added = acls("--add", "--allow-principal", "User:bob", "--operation", "Write",
                 "--operation", "Describe", "--topic", topic)
    assert f"resourceType=TOPIC, name={topic}, patternType=LITERAL" in added.stdout
    listed = acls("--list", "--topic", topic).stdout
    assert "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)" in listed
    assert "(principal=User:bob, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed
    bob = tmp_path / "bob.properties"
    bob.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                   f'sasl.jaas.config={PLAIN_MODULE} required username="bob" password="bob-pw";\n')
    kafka_tools.run("kafka-topics", "--bootstrap-server", broker.bootstrap, "--create",
                    "--topic", topic, "--partitions", "1")
    kafka_tools.run("kafka-console-producer", "--bootstrap-server", f"{HOST}:{port}",
                    "--topic", topic, "--command-config", str(bob), input="ok\n")
    acls("--remove", "--allow-principal", "User:bob", "--operation", "Write", "--topic", topic,
         "--force")
    assert "operation=WRITE" not in acls("--list", "--topic", topic).stdout
