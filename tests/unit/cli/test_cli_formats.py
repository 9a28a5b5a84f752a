"""Line parsing of `strom produce` and record formatting of `strom consume`."""

from __future__ import annotations

import base64
import io
import json

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

from strom.cli.common import UsageError
from strom.cli.consume import TextFormat, format_json, format_text, parse_offset, record_json
from strom.cli.produce import LineError, LineFormat, iter_lines, parse_line

# --------------------------------------------------------------------------- produce


def test_plain_line_is_the_value():
    assert parse_line(b"hello\tworld", LineFormat()) == (None, b"hello\tworld", [])
    assert parse_line(b"", LineFormat()) == (None, b"", [])


def test_key_split_at_first_separator():
    fmt = LineFormat(parse_key=True, key_separator=b":")
    assert parse_line(b"k:v:w", fmt) == (b"k", b"v:w", [])
    assert parse_line(b":v", fmt) == (b"", b"v", [])
    with pytest.raises(LineError):
        parse_line(b"novalue", fmt)


def test_ignore_error_makes_unsplittable_line_a_value():
    fmt = LineFormat(parse_key=True, key_separator=b":", ignore_error=True)
    assert parse_line(b"novalue", fmt) == (None, b"novalue", [])


def test_headers_key_and_value():
    fmt = LineFormat.from_properties({"parse.headers": "true", "parse.key": "true"})
    key, value, headers = parse_line(b"h1:v1,h2:v2\tk\tv", fmt)
    assert (key, value, headers) == (b"k", b"v", [("h1", b"v1"), ("h2", b"v2")])
    with pytest.raises(LineError):
        parse_line(b"h1v1\tk\tv", fmt)


def test_null_marker():
    fmt = LineFormat.from_properties({"parse.key": "true", "key.separator": ",", "null.marker": "NULL",
                                      "parse.headers": "true"})
    assert parse_line(b"h:NULL\tNULL,NULL", fmt) == (None, None, [("h", None)])
    assert parse_line(b"NULL\tk,v", fmt) == (b"k", b"v", [])  # no headers at all


def test_separators_accept_escapes():
    fmt = LineFormat.from_properties({"parse.key": "true", "key.separator": "\\t"})
    assert fmt.key_separator == b"\t"
    with pytest.raises(UsageError):
        LineFormat.from_properties({"key.separator": ""})


def test_iter_lines_strips_lf_and_crlf_and_keeps_last_line():
    assert list(iter_lines(io.BytesIO(b"a\r\nb\n\nc"))) == [b"a", b"b", b"", b"c"]
    assert list(iter_lines(io.BytesIO(b"\xff\xfe\n"))) == [b"\xff\xfe"]


# --------------------------------------------------------------------------- consume


class FakeMsg:
    def __init__(self, value=b"v", key=None, headers=None, ts=(1, 1700000000000), partition=2, offset=7):
        self._value, self._key, self._headers, self._ts = value, key, headers, ts
        self._partition, self._offset = partition, offset

    def value(self):
        return self._value

    def key(self):
        return self._key

    def headers(self):
        return self._headers

    def timestamp(self):
        return self._ts

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def topic(self):
        return "t"


def test_text_value_only_by_default():
    assert format_text(FakeMsg(b"hello"), TextFormat()) == b"hello\n"
    assert format_text(FakeMsg(None), TextFormat()) == b"null\n"


def test_text_all_fields_in_kafka_order():
    fmt = TextFormat(print_key=True, print_timestamp=True, print_offset=True, print_partition=True,
                     print_headers=True)
    msg = FakeMsg(b"v", key=b"k", headers=[("a", b"1"), ("b", None)])
    assert format_text(msg, fmt) == b"CreateTime:1700000000000\tPartition:2\tOffset:7\ta:1,b:null\tk\tv\n"
    msg = FakeMsg(b"v", ts=(0, -1))
    assert format_text(msg, fmt) == b"NO_TIMESTAMP\tPartition:2\tOffset:7\tNO_HEADERS\tnull\tv\n"


def test_text_properties_like_kafka():
    fmt = TextFormat()
    fmt.apply({"print.key": "true", "key.separator": " => ", "line.separator": "\\n\\n"})
    assert format_text(FakeMsg(b"v", key=b"k"), fmt) == b"k => v\n\n"


def test_json_utf8_and_base64():
    msg = FakeMsg(b"\xff\x00", key="ключ".encode(), headers=[("h", b"x"), ("bin", b"\x80"), ("n", None)],
                  ts=(2, 5))
    obj = json.loads(format_json(msg))
    assert obj == {
        "topic": "t", "partition": 2, "offset": 7, "timestamp": 5, "timestamp_type": "LogAppendTime",
        "key": "ключ", "key_base64": False,
        "value": base64.b64encode(b"\xff\x00").decode(), "value_base64": True,
        "headers": [
            {"key": "h", "value": "x", "value_base64": False},
            {"key": "bin", "value": base64.b64encode(b"\x80").decode(), "value_base64": True},
            {"key": "n", "value": None, "value_base64": False},
        ],
    }
    assert format_json(msg).endswith(b"}\n") and format_json(msg).count(b"\n") == 1


def test_json_without_timestamp_or_key():
    obj = record_json(FakeMsg(b"v", ts=(0, -1)))
    assert obj["timestamp"] is None and obj["timestamp_type"] is None
    assert obj["key"] is None and obj["key_base64"] is False and obj["headers"] == []


def test_parse_offset():
    assert parse_offset("earliest") == OFFSET_BEGINNING
    assert parse_offset("LATEST") == OFFSET_END
    assert parse_offset("42") == 42
    for bad in ("-1", "soon", ""):
        with pytest.raises(UsageError):
            parse_offset(bad)
