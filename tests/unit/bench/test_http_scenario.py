"""The http-1k scenario's HTTP client pieces and rows (no broker: a fake server where one is
needed)."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path

import pytest

# bench/ lives at the repository root, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from bench.brokers import (
    BrokerProcess,
    http_api_url,
    rest_api_url,
    strom_spec,
    tansu_spec,
    with_rest_api,
)
from bench.config import QUICK
from bench.http_client import (
    LAST_CHUNK,
    ChunkedDecoder,
    Consumed,
    HttpError,
    Reports,
    Stream,
    binary_record,
    chunk,
    due,
    parse_head,
    records_path,
    split_rate,
)
from bench.report import Outcome, build_rows
from bench.scenarios import BY_NAME
from bench.scenarios.base import Context
from bench.scenarios.http_api import HttpApi

OK = {"error_code": 200, "cluster_id": "c", "topic_name": "t", "partition_id": 0, "offset": 1}


def test_a_record_is_one_line_of_json_with_its_value_in_base64() -> None:
    line = binary_record(b"\x00\x01 value")
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    record = json.loads(line)
    assert record["value"]["type"] == "BINARY"
    assert base64.b64decode(record["value"]["data"]) == b"\x00\x01 value"


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_chunked_body_decodes_whatever_the_pieces(step: int) -> None:
    payloads = [b"first\n", b"x" * 300, b'{"a": 1}\n']
    body = b"".join(chunk(p) for p in payloads) + b"5;ext=1\r\nhello\r\n" + LAST_CHUNK
    decoder = ChunkedDecoder()
    out = b""
    for i in range(0, len(body), step):
        assert not decoder.done
        out += decoder.feed(body[i : i + step])
    assert decoder.done
    assert out == b"".join(payloads) + b"hello"


def test_chunked_body_with_trailers_ends_after_them() -> None:
    decoder = ChunkedDecoder()
    assert decoder.feed(chunk(b"abc") + b"0\r\nX-Trailer: 1\r\n") == b"abc"
    assert not decoder.done
    decoder.feed(b"\r\n")
    assert decoder.done


def test_chunked_body_refuses_a_broken_frame() -> None:
    with pytest.raises(HttpError):
        ChunkedDecoder().feed(b"3\r\nabcXY")
    with pytest.raises(HttpError):
        ChunkedDecoder().feed(b"zz\r\n")


def test_reports_count_stored_and_failed_records_across_pieces() -> None:
    r = Reports()
    stream = (json.dumps(OK) + "\n" + json.dumps({**OK, "offset": 2}) + "\n"
              + json.dumps({"error_code": 40403, "message": "no such partition"}) + "\n"
              + '{"offset": 3,"error_code":200}\n' + json.dumps(OK)).encode()
    for i in range(0, len(stream), 5):
        r.feed(stream[i : i + 5])
    assert (r.ok, r.failed) == (3, 1)
    r.close()  # the last report had no newline
    assert (r.ok, r.failed, r.seen) == (4, 1, 5)
    assert r.first_error == "40403: no such partition"


def test_a_line_that_is_not_json_is_a_failure() -> None:
    r = Reports()
    r.feed(b"<html>oops</html>\n")
    assert (r.ok, r.failed) == (0, 1)
    assert r.first_error == "<html>oops</html>"


def test_pacing_owes_records_at_the_rate() -> None:
    assert due(1000, 0) == 0
    assert due(1000, 0.0025) == 2
    assert due(1000, 2.0) == 2000
    assert due(1000, -1) == 0
    assert split_rate(3000, 2) == [1500, 1500]


def test_response_head() -> None:
    status, headers = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                                 b"content-type: application/json\r\n\r\n")
    assert status == 200
    assert headers == {"transfer-encoding": "chunked", "content-type": "application/json"}
    with pytest.raises(HttpError):
        parse_head(b"garbage\r\n\r\n")


def test_records_path_quotes_its_parts() -> None:
    assert records_path("abc", "my topic") == "/v3/clusters/abc/topics/my%20topic/records"


def test_consumed_offsets_must_be_complete_and_unique() -> None:
    c = Consumed()
    c.add([{"partition": 0, "offset": 0}, {"partition": 1, "offset": 0}])
    c.add([{"partition": 0, "offset": 1}])
    assert c.problem(3) is None
    assert c.problem(4) == "consumed 3 of 4 records"
    c.add([{"partition": 0, "offset": 1}])  # a duplicate
    assert "gaps or duplicates" in (c.problem(4) or "")
    gap = Consumed()
    gap.add([{"partition": 2, "offset": 0}, {"partition": 2, "offset": 2}])
    assert "gaps or duplicates" in (gap.problem(2) or "")


async def _fake_api(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers a streaming produce as Strom's does: a report per record, while reading."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                 b"transfer-encoding: chunked\r\n\r\n")
    decoder, pending, offset = ChunkedDecoder(), b"", 0
    while not decoder.done:
        data = await reader.read(4096)
        if not data:
            break
        lines = (pending + decoder.feed(data)).split(b"\n")
        pending = lines.pop()
        for line in lines:
            json.loads(line)
            writer.write(chunk(json.dumps({**OK, "offset": offset}).encode() + b"\n"))
            offset += 1
        await writer.drain()
    writer.write(LAST_CHUNK)
    await writer.drain()
    writer.close()


def test_a_stream_reads_its_reports_while_it_sends() -> None:
    async def main() -> Reports:
        server = await asyncio.start_server(_fake_api, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            s = Stream(f"http://127.0.0.1:{port}", records_path("c", "t"), binary_record(b"v"))
            await s.open()
            reading = asyncio.ensure_future(s.read_reports())
            await s.send(1_000)  # more than one full chunk, and a partial one
            await s.end()
            await asyncio.wait_for(reading, 10)
            s.close()
            return s.reports

    reports = asyncio.run(main())
    assert (reports.ok, reports.failed) == (1_000, 0)


def test_the_http_api_url_comes_from_the_start_up_line() -> None:
    line = ("Strom 0.1.0 broker 0 listening on PLAINTEXT://127.0.0.1:9092 (advertised "
            "127.0.0.1:9092), data in /d, cluster id X, metrics at http://127.0.0.1:1/metrics, "
            "HTTP API at http://127.0.0.1:41234\n")
    assert http_api_url("INFO something\n" + line) == "http://127.0.0.1:41234"
    assert http_api_url(line.replace("\n", ", later: 1\n")) == "http://127.0.0.1:41234"
    assert http_api_url("no such line") is None


def test_with_rest_api_asks_for_a_port_of_the_brokers_choice(tmp_path: Path) -> None:
    spec = with_rest_api(strom_spec("strom"))
    argv = spec.command(9092, tmp_path)
    assert argv[-2:] == ["--override", "rest.listeners=http://127.0.0.1:0"]
    with pytest.raises(ValueError):
        with_rest_api(tansu_spec("tansu"))
    broker = BrokerProcess(spec, tmp_path)
    assert rest_api_url(broker) is None  # not started: no start-up line yet
    assert rest_api_url(BrokerProcess(strom_spec("strom"), tmp_path)) is None


def test_rows_and_peers() -> None:
    scenario = BY_NAME["http-1k"]
    assert isinstance(scenario, HttpApi)
    rows = scenario.rows(QUICK)
    keys = [m.key for m in rows.metrics]
    assert len(keys) == len(set(keys))
    ctx = Context(sizes=QUICK, workdir=Path("/nonexistent"), log=lambda _m: None)
    out = scenario.run(tansu_spec("/nonexistent/tansu"), ctx)  # starts nothing
    assert out.failed is None and set(out.na) == set(keys)
    assert out.na["http_produce_rps"] == "Tansu has no HTTP API"


def test_the_load_goal_is_judged_on_strom_alone() -> None:
    rows = HttpApi().rows(QUICK)

    def verdict(ratio: float) -> str:
        strom = Outcome(metrics={"loaded_vs_alone": ratio})
        kafka = Outcome(na={m.key: "Kafka has no HTTP API" for m in rows.metrics})
        table = build_rows([rows], {"http-1k": {"Strom": [strom], "Kafka": [kafka]}},
                           "Strom", ["Kafka"], {})
        (row,) = [r for r in table if r.metric.startswith("Kafka-protocol produce, with")]
        assert row.target == ">= 0.9 x"
        return row.verdict

    assert verdict(0.95) == "pass"
    assert verdict(0.8) == "FAIL"
