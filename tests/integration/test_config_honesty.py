"""Configs are honest: a real broker refuses what it would silently not do, and names what it
accepts without acting on."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import NewTopic

from . import clients as kc
from .broker import HOST, STROM_BIN, free_port

pytestmark = pytest.mark.timeout(90)

T = 30  # seconds for a process or an admin future


@pytest.fixture(autouse=True)
def _strom_only(peer: str | None) -> None:
    if peer:
        pytest.skip("checks Strom's own start-up")


def test_a_sasl_ssl_listener_without_key_store_refuses_to_start_with_one_line(tmp_path) -> None:
    port = free_port()
    spec = f"SASL_SSL://{HOST}:{port}"
    # subprocess.run kills the broker if it outlives the timeout
    result = subprocess.run(
        [str(STROM_BIN), "broker", "--override", f"listeners={spec}",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=T, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "strom broker: listener SASL_SSL: a TLS listener needs ssl.keystore.location (or "
        "ssl.keystore.key and ssl.keystore.certificate.chain)"
    ]
    assert not (tmp_path / "data").exists(), "refused before touching the log directory"


def test_gssapi_refuses_to_start_with_one_line(tmp_path) -> None:
    port = free_port()
    result = subprocess.run(
        [str(STROM_BIN), "broker", "--override", f"listeners=SASL_PLAINTEXT://{HOST}:{port}",
         "--override", f"log.dirs={tmp_path / 'data'}"],
        capture_output=True, text=True, timeout=T, stdin=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("strom broker: listener SASL_PLAINTEXT: SASL mechanism GSSAPI")


def test_unimplemented_config_is_named_in_the_log(make_broker, unique_topic) -> None:
    broker = make_broker({"log.preallocate": "true"})
    warning = ("level=WARNING logger=strom.config.checks msg=config log.preallocate is accepted "
               "but not implemented by Strom; it has no effect")
    assert warning in broker.log_text()

    # topic configs without effect are accepted (Kafka tools set them) ...
    kc.create_topic(broker.bootstrap, unique_topic("prealloc"), config={"preallocate": "true"})
    # ... except tiered storage, refused as Kafka refuses it on a broker without it
    a = kc.admin(broker.bootstrap)
    name = unique_topic("tiered")
    future = a.create_topics([NewTopic(name, 1, 1, config={"remote.storage.enable": "true"})],
                             operation_timeout=T, request_timeout=T)[name]
    with pytest.raises(KafkaException) as info:
        future.result(T)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled" in info.value.args[0].str()
