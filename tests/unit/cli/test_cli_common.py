"""Parsing helpers shared by the CLI commands."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from strom.cli.common import (
    EXIT_USAGE,
    UsageError,
    kafka_error_code,
    kafka_error_text,
    parse_bool,
    parse_config_list,
    parse_config_options,
    parse_kv,
    parse_kv_list,
    parse_properties,
    translate_client_properties,
    uuid_text,
)


def test_parse_kv_keeps_equals_in_value():
    assert parse_kv("a=b=c") == ("a", "b=c")
    assert parse_kv(" retention.ms =100") == ("retention.ms", "100")
    assert parse_kv("empty=") == ("empty", "")


@pytest.mark.parametrize("bad", ["novalue", "=x", ""])
def test_parse_kv_rejects(bad):
    with pytest.raises(UsageError) as info:
        parse_kv(bad, "header")
    assert info.value.exit_code == EXIT_USAGE
    assert "header" in info.value.message


def test_parse_kv_list_later_wins():
    assert parse_kv_list(["a=1", "b=2", "a=3"]) == {"a": "3", "b": "2"}
    assert parse_kv_list(None) == {}


def test_parse_config_list_kafka_syntax():
    assert parse_config_list("a=1,b=[x,y,z],c=3") == {"a": "1", "b": "x,y,z", "c": "3"}
    assert parse_config_list("cleanup.policy=[compact,delete]") == {"cleanup.policy": "compact,delete"}
    assert parse_config_list("k=") == {"k": ""}
    assert parse_config_options(["a=1", "b=2,c=3"]) == {"a": "1", "b": "2", "c": "3"}


@pytest.mark.parametrize("bad", ["a", "a=1,b", "a=[x,y", "a=[x]y", "=1"])
def test_parse_config_list_rejects(bad):
    with pytest.raises(UsageError):
        parse_config_list(bad)


def test_parse_properties_java_format():
    text = "\n".join([
        "# comment",
        "! another comment",
        "",
        "bootstrap.servers=host:9092",
        "security.protocol : SASL_PLAINTEXT",
        "client.id   cli",
        "  indented.key=v",
        "multi=first,\\",
        "    second",
        "escaped=tab\\there\\u0041",
        "key\\=with\\:seps=1",
        "empty=",
        "sasl.jaas.config=x y",
    ])
    assert parse_properties(text) == {
        "bootstrap.servers": "host:9092",
        "security.protocol": "SASL_PLAINTEXT",
        "client.id": "cli",
        "indented.key": "v",
        "multi": "first,second",
        "escaped": "tab\there" + "A",
        "key=with:seps": "1",
        "empty": "",
        "sasl.jaas.config": "x y",
    }


def test_parse_properties_even_backslashes_do_not_continue():
    assert parse_properties("a=x\\\\\nb=2") == {"a": "x\\", "b": "2"}


def test_translate_jaas_plain_login():
    props = translate_client_properties({
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                            'username="alice" password="s3c\\"ret";',
    })
    assert props == {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": 's3c"ret'}


def test_parse_bool():
    assert parse_bool("TRUE", "x") is True
    assert parse_bool("false", "x") is False
    with pytest.raises(UsageError):
        parse_bool("maybe", "x")


class _Uuid:
    def __init__(self, msb: int, lsb: int) -> None:
        self.msb, self.lsb = msb, lsb

    def get_most_significant_bits(self) -> int:
        return self.msb

    def get_least_significant_bits(self) -> int:
        return self.lsb


def test_uuid_text_is_kafka_url_safe_base64():
    # Kafka prints topic ids as URL-safe base64 without padding (22 characters).
    assert uuid_text(_Uuid(0, 0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    text = uuid_text(_Uuid(-1, -1))  # negative Java longs are the same bits
    assert text == "_____________________w"
    assert uuid_text(None) == ""


def test_kafka_error_text_and_code():
    e = KafkaException(KafkaError(KafkaError.TOPIC_ALREADY_EXISTS, "Topic exists."))
    assert kafka_error_text(e) == "TOPIC_ALREADY_EXISTS: Topic exists."
    assert kafka_error_code(e) == 36
    assert kafka_error_code(CliErrorLike("x")) is None
    assert kafka_error_text(ValueError("plain")) == "plain"


class CliErrorLike(Exception):
    pass
