"""`strom console` end to end: a real broker, records and a group made with confluent-kafka,
the console as a subprocess, and headless Chromium reading its pages. The numbers on the pages
must be the ones the clients made; screenshots of every page are saved as test artifacts."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.console.records import iso_time
from strom.console.svg import HEIGHT, PAD_BOTTOM

from .console_process import ConsoleProcess, get

pytestmark = pytest.mark.timeout(90)

TOPIC = "orders"
GROUP = "billing"
RECORDS = 30  # record i goes to partition i % 3 with timestamp BASE + i seconds
HOSTILE = "<script>document.title='owned'</script>"
COMMITTED = {0: 4, 1: 10, 2: 7}  # each partition ends at offset 10: lag 6, 0 and 3


def key(i: int) -> str:
    return f"key-{i}"


def value(i: int) -> str:
    return HOSTILE if i == RECORDS - 1 else f"value-{i}"


@pytest.fixture(scope="module")
def cluster(make_module_broker) -> dict[str, Any]:
    broker = make_module_broker()
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(TOPIC, 3, 1)])[TOPIC].result(30)
    base = int(time.time() * 1000) - 60_000
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(TOPIC, key=key(i), value=value(i), partition=i % 3,
                         timestamp=base + i * 1000, headers=[("n", str(i).encode())])
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bs, "group.id": GROUP, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                        asynchronous=False)
    finally:
        consumer.close()
    cluster_id = admin.describe_cluster().result(30).cluster_id
    return {"bootstrap": bs, "base": base, "cluster_id": cluster_id, "port": broker.port}


@pytest.fixture(scope="module")
def console(cluster, start_console) -> ConsoleProcess:
    return start_console(cluster["bootstrap"], "--sample-interval", "1", "--timeout", "10")


def cells(page: Any, row: str, css: str) -> str:
    return page.locator(f"{row} {css}").inner_text().strip()


def shot(page: Any, artifacts: Path, name: str) -> None:
    page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)


def test_pages_show_what_the_clients_did(cluster, console, browser, artifacts) -> None:
    page = browser.new_page()
    url = console.url

    page.goto(url + "/")
    assert page.locator("#cluster-id").inner_text() == cluster["cluster_id"]
    assert page.locator("#broker-count").inner_text() == "1"
    assert f"127.0.0.1:{cluster['port']}" in page.locator("#brokers").inner_text()
    shot(page, artifacts, "overview")

    page.goto(url + "/topics")
    row = f'#topics tr[data-topic="{TOPIC}"]'
    assert cells(page, row, "td.messages") == str(RECORDS)
    assert page.locator(f"{row} td").nth(1).inner_text() == "3"
    shot(page, artifacts, "topics")

    page.click(f"{row} a")
    page.wait_for_url(f"**/topics/{TOPIC}")
    for p in range(3):
        prow = f'#partitions tr[data-partition="{p}"]'
        assert (cells(page, prow, "td.start"), cells(page, prow, "td.end")) == ("0", "10")
    rows = page.locator("#records tbody tr")
    assert rows.count() == 20  # a page of the newest records
    newest = page.locator("#records tbody tr").first
    assert newest.get_attribute("data-offset") == "9"
    assert newest.locator("td.key").inner_text() == key(RECORDS - 1)
    # the hostile value is text on the page, and it did not run
    assert newest.locator("td.value").inner_text() == HOSTILE
    assert page.title() != "owned"
    assert page.evaluate("document.querySelectorAll('#records script').length") == 0
    second = rows.nth(1)
    assert second.locator("td.key").inner_text() == key(RECORDS - 2)
    assert second.locator("td.value").inner_text() == value(RECORDS - 2)
    assert second.locator("td.headers").inner_text() == f"n: {RECORDS - 2}"
    shot(page, artifacts, "topic")

    # search by offset: partition 1, offset 3 is record 10 (i % 3 == 1, the 4th there)
    page.select_option("#by-offset select[name=partition]", "1")
    page.fill("#by-offset input[name=offset]", "3")
    page.click("#by-offset button")
    page.wait_for_url("**offset=3**")
    first = page.locator("#records tbody tr").first
    assert (first.get_attribute("data-partition"), first.get_attribute("data-offset")) == \
        ("1", "3")
    assert first.locator("td.key").inner_text() == key(10)
    assert page.locator("#records tbody tr").count() == 7  # offsets 3..9 of partition 1
    shot(page, artifacts, "search-offset")

    # search by time: the first record at or after record 17's timestamp is record 17
    page.fill("#by-time input[name=time]", iso_time(cluster["base"] + 17_000))
    page.click("#by-time button")
    page.wait_for_url("**time=**")
    first = page.locator("#records tbody tr").first
    assert first.locator("td.key").inner_text() == key(17)
    assert first.locator("td.time").inner_text() == iso_time(cluster["base"] + 17_000)
    keys = page.locator("#records tbody td.key").all_inner_texts()
    assert keys == [key(i) for i in range(17, RECORDS)]
    shot(page, artifacts, "search-time")

    page.goto(url + "/groups")
    grow = f'#groups tr[data-group="{GROUP}"]'
    lag = sum(10 - o for o in COMMITTED.values())
    assert cells(page, grow, "td.lag") == str(lag)
    assert cells(page, grow, "td.members") == "0"
    shot(page, artifacts, "groups")

    page.click(f"{grow} a")
    page.wait_for_url(f"**/groups/{GROUP}")
    assert page.locator("#group-lag").inner_text() == str(lag)
    for p, committed in COMMITTED.items():
        lrow = f'#lag tr[data-topic="{TOPIC}"][data-partition="{p}"]'
        assert (cells(page, lrow, "td.committed"), cells(page, lrow, "td.end"),
                cells(page, lrow, "td.lag")) == (str(committed), "10", str(10 - committed))
    shot(page, artifacts, "group")
    page.close()


def test_a_live_member_and_its_assignment(cluster, console, browser, artifacts) -> None:
    consumer = Consumer({"bootstrap.servers": cluster["bootstrap"], "group.id": "live",
                         "client.id": "console-test-client", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer got no assignment"
            consumer.poll(0.2)
        page = browser.new_page()
        page.goto(console.url + "/groups/live")
        assert page.locator("#group-state").inner_text() == "Stable"
        member = page.locator("#members tbody tr").first
        texts = member.locator("td").all_inner_texts()
        assert texts[1] == "console-test-client"
        assert texts[4] == f"{TOPIC} [0, 1, 2]"
        for p in range(3):  # nothing committed: no lag to show, the member owns the partition
            lrow = f'#lag tr[data-topic="{TOPIC}"][data-partition="{p}"]'
            assert cells(page, lrow, "td.committed") == "-"
            assert page.locator(f"{lrow} td").nth(5).inner_text() == "console-test-client"
        shot(page, artifacts, "group-live")
        page.close()
    finally:
        consumer.close()


def test_charts_draw_the_sampled_hour(cluster, console, browser, artifacts) -> None:
    """More records arrive while the console samples every second: the records-in and bytes-in
    charts get points above zero and the lag chart follows the group."""
    producer = Producer({"bootstrap.servers": cluster["bootstrap"], "linger.ms": 0})
    deadline = time.monotonic() + 30
    seen_in = False
    while not seen_in:
        assert time.monotonic() < deadline, get(console.port, "/api/history").text
        for i in range(50):
            producer.produce(TOPIC, key=f"more-{i}", value=b"x" * 100, partition=i % 3)
        assert producer.flush(30) == 0
        time.sleep(0.5)  # pacing: a few readings of the sampler see each burst
        samples = get(console.port, "/api/history").json()["samples"]
        seen_in = (any(s["in_rate"].get(TOPIC, 0) > 0 for s in samples)
                   and any(s["in_bytes"].get(TOPIC, 0) > 0 for s in samples)
                   and len(samples) >= 3)

    page = browser.new_page()
    page.goto(console.url + "/charts")
    inflow = page.locator('polyline[data-series="in"]')
    assert int(inflow.get_attribute("data-count")) >= 2
    points = [tuple(map(float, p.split(","))) for p in inflow.get_attribute("points").split()]
    assert any(y < HEIGHT - PAD_BOTTOM for _, y in points), points  # a point above zero
    bytes_in = page.locator('polyline[data-series="bytes in"]').get_attribute("points")
    assert any(float(p.split(",")[1]) < HEIGHT - PAD_BOTTOM for p in bytes_in.split())
    lag_line = page.locator(f'polyline[data-series="{GROUP}"]')
    assert int(lag_line.get_attribute("data-count")) >= 2
    assert page.locator("figure.chart").count() == 4
    shot(page, artifacts, "charts")

    page.goto(f"{console.url}/topics/{TOPIC}")
    topic_line = page.locator(f'polyline[data-series="{TOPIC}"]')
    assert int(topic_line.get_attribute("data-count")) >= 2
    page.close()
