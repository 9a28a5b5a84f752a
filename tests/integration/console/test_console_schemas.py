"""The console's topic page shows the topic's subjects, schema versions and validation settings
(issue 31 point 9), read from the schema registry given with --registry-url."""

from __future__ import annotations

import json

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from .. import clients as kc
from ..registry.test_registry_api import V1, V2, registry_url, wait_ready
from .console_process import get


def test_a_topic_page_shows_its_schemas(make_broker, start_console) -> None:
    broker = make_broker({"schema.registry.listeners": "http://127.0.0.1:0",
                          "metrics.listener": ""})
    url = registry_url(broker)
    wait_ready(url)
    kc.create_topic(broker.bootstrap, "clicks", 1, {
        "confluent.value.schema.validation": "true",
        "strom.value.schema.validation.mode": "decode"})
    client = SchemaRegistryClient({"url": url})
    client.register_schema("clicks-value", Schema(V1, "AVRO"))
    latest = client.register_schema("clicks-value", Schema(V2, "AVRO"))
    console = start_console(broker.bootstrap, "--registry-url", url)
    page = get(console.port, "/topics/clicks")
    assert page.status == 200
    text = page.text
    assert 'class="subject">clicks-value<' in text
    assert 'class="versions">1, 2<' in text
    assert f"version 2, id {latest}" in text
    assert "Validation of values</dt><dd>true (decode)" in text
    assert json.loads(V2)["fields"][1]["name"] in text  # the latest schema is shown
    # a registry that cannot be reached: one line on the page, not a failed page
    away = start_console(broker.bootstrap, "--registry-url", "http://127.0.0.1:9",
                         "--timeout", "2")
    page = get(away.port, "/topics/clicks")
    assert page.status == 200 and "cannot read the schema registry" in page.text


def test_pages_link_to_the_http_api(make_broker, start_console) -> None:
    """With --rest-url (issue 32 point 7), the console links to the HTTP API's OpenAPI document
    and each topic page to the topic's records and live event stream over HTTP."""
    broker = make_broker({"metrics.listener": ""})
    kc.create_topic(broker.bootstrap, "views", 1)
    rest = "http://127.0.0.1:8082"
    console = start_console(broker.bootstrap, "--rest-url", rest + "/")
    page = get(console.port, "/topics/views")
    assert page.status == 200
    assert f'href="{rest}/openapi.json"' in page.text
    assert f'href="{rest}/strom/v1/topics/views/events"' in page.text
    assert f"POST {rest}/v3/clusters/" in page.text and "/topics/views/records" in page.text
    plain = start_console(broker.bootstrap)
    assert "HTTP API" not in get(plain.port, "/topics/views").text
