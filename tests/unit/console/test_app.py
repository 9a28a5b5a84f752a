"""The pages' templates: hostile record text is escaped, charts and numbers are drawn."""

from __future__ import annotations

import dataclasses

from strom.console.app import _jsonable, _num, _templates
from strom.console.cluster import PartitionInfo, TopicInfo
from strom.console.records import RecordView
from strom.console.svg import line_chart

HOSTILE = '<script>document.title="owned"</script><img src=x onerror=alert(1)>'


def render(name: str, **context: object) -> str:
    env = _templates().env
    base = {"title": "t", "now": "now", "interval": 1.0}
    return env.get_template(name).render(**base, **context)


def test_topic_page_escapes_keys_values_and_headers() -> None:
    topic = TopicInfo("t", False, (PartitionInfo(0, 0, (0,), (0,), 0, 1, 10),))
    record = RecordView(0, 0, 1_700_000_000_000, HOSTILE, HOSTILE, len(HOSTILE),
                        ((HOSTILE, HOSTILE),))
    html = render("topic.html", topic=topic, records=[record], search="newest",
                  chart=line_chart("In", "records/s", {"t": [(1.0, 2.0), (2.0, 3.0)]}, 2.0),
                  query={})
    assert "<script>" not in html and "<img" not in html
    assert html.count("&lt;script&gt;") == 4  # key, value, header name and header value
    assert 'data-count="2"' in html and "<polyline" in html


def test_numbers_and_json() -> None:
    assert [_num(v) for v in (None, 3, 1234567, 2.0, 2.25)] == ["-", "3", "1,234,567", "2",
                                                                   "2.2"]
    part = PartitionInfo(0, 0, (0,), (0,), 2, 12, None)
    data = _jsonable(TopicInfo("t", False, (part,)))
    assert data["messages"] == 10 and data["size"] is None
    assert data["partitions"][0]["replicas"] == [0] and data["partitions"][0]["messages"] == 10
    assert dataclasses.is_dataclass(part)
