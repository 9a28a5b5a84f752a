"""AlterUserScramCredentials and DescribeUserScramCredentials, with Kafka's checks and texts."""

from __future__ import annotations

import scramp

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.principal import KafkaPrincipal
from strom.security.sasl.mechanisms import ScramExchange, salted_password
from strom.security.scram_store import credentials_of, lookup_in
from strom.security.session import SaslSettings, Session

SHA256, SHA512 = 1, 2
NAMES = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}
SALT = b"0123456789abcdef01234567"


def upsertion(user: str, mechanism: int = SHA256, password: str = "secret",
              iterations: int = 4096) -> dict:
    salted = (salted_password(NAMES[mechanism], password, SALT, iterations)
              if mechanism in NAMES else b"x" * 32)
    return {"name": user, "mechanism": mechanism, "iterations": iterations, "salt": SALT,
            "salted_password": salted}


def alter(h, upsertions=(), deletions=()) -> dict[str, tuple[int, str | None]]:
    r = h.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
        "deletions": list(deletions), "upsertions": list(upsertions)})
    return {x.user: (x.error_code, x.error_message) for x in r.results}


def describe(h, *users: str, all_users: bool = False):
    body = {"users": None if all_users else [{"name": u} for u in users]}
    r = h.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, body)
    assert r.error_code == ErrorCode.NONE
    return {x.user: (x.error_code, x.error_message,
                     [(c.mechanism, c.iterations) for c in x.credential_infos])
            for x in r.results}


def test_upsert_then_describe(broker_harness) -> None:
    h = broker_harness
    assert alter(h, [upsertion("carol", SHA256), upsertion("dave", SHA512, iterations=8192)]) == {
        "carol": (0, None), "dave": (0, None)}
    assert describe(h, "carol", "dave") == {"carol": (0, None, [(SHA256, 4096)]),
                                            "dave": (0, None, [(SHA512, 8192)])}
    # stored salted and hashed, never as the salted password itself
    stored = h.broker.image.user_configs["carol"]["SCRAM-SHA-256"]
    assert stored.startswith("salt=") and "iterations=4096" in stored


def test_both_mechanisms_of_one_user_in_two_requests(broker_harness) -> None:
    h = broker_harness
    assert alter(h, [upsertion("carol", SHA512, iterations=4096)]) == {"carol": (0, None)}
    assert alter(h, [upsertion("carol", SHA256, iterations=10000)]) == {"carol": (0, None)}
    assert describe(h, "carol") == {"carol": (0, None, [(SHA256, 10000), (SHA512, 4096)])}


def test_an_upsert_replaces_the_credential(broker_harness) -> None:
    h = broker_harness
    alter(h, [upsertion("carol", iterations=4096)])
    alter(h, [upsertion("carol", iterations=5000)])
    assert describe(h, "carol")["carol"][2] == [(SHA256, 5000)]


def test_iteration_bounds(broker_harness) -> None:
    h = broker_harness
    results = alter(h, [upsertion("low", iterations=100), upsertion("high", iterations=20000),
                        upsertion("min", iterations=4096), upsertion("max", iterations=16384)])
    assert results == {
        "low": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"),
        "high": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"),
        "min": (0, None), "max": (0, None)}
    assert ErrorCode.UNACCEPTABLE_CREDENTIAL == 93
    assert sorted(describe(h, all_users=True)) == ["max", "min"]


def test_an_unknown_mechanism(broker_harness) -> None:
    results = alter(broker_harness, [upsertion("carol", mechanism=3)],
                    [{"name": "dave", "mechanism": 0}])
    assert results == {
        "carol": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "dave": (ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")}
    assert ErrorCode.UNSUPPORTED_SASL_MECHANISM == 33
    assert describe(broker_harness, all_users=True) == {}


def test_the_same_user_twice_in_one_request(broker_harness) -> None:
    h = broker_harness
    message = "A user credential cannot be altered twice in the same request"
    assert alter(h, [upsertion("carol", SHA256), upsertion("carol", SHA512)]) == {
        "carol": (ErrorCode.DUPLICATE_RESOURCE, message)}
    assert ErrorCode.DUPLICATE_RESOURCE == 92
    alter(h, [upsertion("dave")])
    assert alter(h, [upsertion("dave", SHA512)], [{"name": "dave", "mechanism": SHA256}]) == {
        "dave": (ErrorCode.DUPLICATE_RESOURCE, message)}
    # the refused user is left alone; the other users of the request are altered
    assert alter(h, [upsertion("erin"), upsertion("carol"), upsertion("carol", SHA512)]) == {
        "erin": (0, None), "carol": (ErrorCode.DUPLICATE_RESOURCE, message)}
    assert describe(h, all_users=True) == {"dave": (0, None, [(SHA256, 4096)]),
                                           "erin": (0, None, [(SHA256, 4096)])}


def test_an_empty_user_name(broker_harness) -> None:
    assert alter(broker_harness, [upsertion("")]) == {
        "": (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")}


def test_deleting_a_credential_that_does_not_exist(broker_harness) -> None:
    h = broker_harness
    alter(h, [upsertion("carol", SHA256)])
    assert alter(h, deletions=[{"name": "carol", "mechanism": SHA512},
                               {"name": "nobody", "mechanism": SHA256}]) == {
        "carol": (ErrorCode.RESOURCE_NOT_FOUND,
                  "Attempt to delete a user credential that does not exist"),
        "nobody": (ErrorCode.RESOURCE_NOT_FOUND,
                   "Attempt to delete a user credential that does not exist")}
    assert ErrorCode.RESOURCE_NOT_FOUND == 91
    assert describe(h, "carol") == {"carol": (0, None, [(SHA256, 4096)])}


def test_describing_an_unknown_user(broker_harness) -> None:
    h = broker_harness
    alter(h, [upsertion("carol")])
    assert describe(h, "carol", "nobody") == {
        "carol": (0, None, [(SHA256, 4096)]),
        "nobody": (ErrorCode.RESOURCE_NOT_FOUND,
                   "Attempt to describe a user credential that does not exist: nobody", [])}


def test_describing_a_user_twice(broker_harness) -> None:
    h = broker_harness
    alter(h, [upsertion("carol")])
    assert describe(h, "carol", "carol") == {"carol": (
        ErrorCode.DUPLICATE_RESOURCE,
        "Cannot describe SCRAM credentials for the same user twice in a single request: carol",
        [])}


def test_describing_every_user(broker_harness) -> None:
    h = broker_harness
    assert describe(h, all_users=True) == {}
    alter(h, [upsertion("dave", SHA512), upsertion("carol", SHA256)])
    alter(h, [upsertion("carol", SHA512)])
    everyone = describe(h, all_users=True)
    assert list(everyone) == ["carol", "dave"]
    assert everyone["carol"] == (0, None, [(SHA256, 4096), (SHA512, 4096)])
    assert describe(h) == everyone  # an empty list means every user too, as in Kafka


def test_delete_removes_the_credential(broker_harness) -> None:
    h = broker_harness
    alter(h, [upsertion("carol", SHA256), upsertion("dave", SHA256)])
    alter(h, [upsertion("carol", SHA512)])
    assert alter(h, deletions=[{"name": "carol", "mechanism": SHA256}]) == {"carol": (0, None)}
    assert describe(h, "carol") == {"carol": (0, None, [(SHA512, 4096)])}
    assert alter(h, deletions=[{"name": "carol", "mechanism": SHA512}]) == {"carol": (0, None)}
    assert describe(h, "carol")["carol"][0] == ErrorCode.RESOURCE_NOT_FOUND
    assert list(describe(h, all_users=True)) == ["dave"]
    assert credentials_of(h.broker.image.user_configs, "carol") == {}


def test_a_stored_credential_authenticates(broker_harness) -> None:
    h = broker_harness
    alter(h, [upsertion("carol", SHA512, password="carol-secret")])
    lookup = lookup_in(lambda: h.broker.image.user_configs)
    h.conn.session = session = Session("CLIENT", "SASL_PLAINTEXT", h.conn.peer, sasl=SaslSettings(
        {"SCRAM-SHA-512": lambda: ScramExchange("SCRAM-SHA-512", lookup)}))
    assert h.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}).error_code == 0
    client = scramp.ScramClient(["SCRAM-SHA-512"], "carol", "carol-secret")
    r = h.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()})
    assert r.error_code == 0, r.error_message
    client.set_server_first(bytes(r.auth_bytes).decode())
    r = h.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_final().encode()})
    assert r.error_code == 0, r.error_message
    client.set_server_final(bytes(r.auth_bytes).decode())
    assert session.principal == KafkaPrincipal.user("carol")
