"""The console's port answers only what it serves (issue 18, point 6): GET and HEAD only, no
directory listing, no way out of its static folder, errors without a traceback, 127.0.0.1 by
default, and slow clients neither stall it nor reach the broker."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient

from strom.console.app import create_app
from strom.console.cluster import ClusterInfo, GroupInfo, GroupSummary, TopicInfo
from strom.console.records import RecordView
from strom.console.sampler import History
from strom.http.server import HEAD_TIMEOUT_S, make_server

from ..broker import HOST, free_port
from .console_process import ConsoleProcess, Reply, get, request

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def broker(make_module_broker):
    return make_module_broker()


@pytest.fixture(scope="module")
def console(broker, start_console) -> ConsoleProcess:
    return start_console(broker.bootstrap, "--timeout", "10")  # no --host: the default


def assert_short_page(reply: Reply) -> None:
    for leak in ("Traceback", "File \"", "site-packages", "Exception", "Error:"):
        assert leak not in reply.text, reply.text
    assert len(reply.body) < 4000


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE"])
def test_only_get_and_head(console, method: str) -> None:
    for path in ("/", "/topics", "/api/topics", "/static/console.css", "/nowhere"):
        reply = request(console.port, method, path, body=b"x=1")
        assert reply.status == 405, (method, path, reply.status)
        assert reply.headers["allow"] == "GET, HEAD"


def test_get_and_head_serve_with_the_security_headers(console) -> None:
    page = get(console.port, "/topics")
    assert page.status == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    assert "server" not in page.headers
    head = request(console.port, "HEAD", "/topics")
    assert head.status == 200 and head.body == b""


@pytest.mark.parametrize("path", [
    "/static/", "/static", "/static/.", "/static/../", "/static/../app.py",
    "/static/%2e%2e/app.py", "/static/..%2fapp.py", "/static/..%2f..%2fcli%2fconsole.py",
    "/static//etc/passwd", "/static/%2fetc%2fpasswd", "/../../etc/passwd",
    "/static/../templates/base.html", "/templates/base.html", "/app.py",
])
def test_no_listing_and_no_way_out_of_static(console, path: str) -> None:
    reply = get(console.port, path)
    assert reply.status == 404, (path, reply.status, reply.text[:300])
    assert "No such page." in reply.text
    for content in ('href="console.css"', "Index of", "import ", "root:", "{% block"):
        assert content not in reply.text, (path, content)
    assert_short_page(reply)


def get_once_coordinated(port: int, path: str) -> Reply:
    """GET a group page, polling through its 503s: a new cluster creates __consumer_offsets on
    the first group request, and each group's coordinator answers once its partition is up."""
    deadline = time.monotonic() + 30
    while (reply := get(port, path)).status == 503:
        assert time.monotonic() < deadline, reply.text
        time.sleep(0.1)  # poll interval
    return reply


def test_errors_are_short_pages(console) -> None:
    missing = get(console.port, "/topics/no-such-topic")
    assert missing.status == 404 and "no topic named" in missing.text
    assert_short_page(missing)
    group = get_once_coordinated(console.port, "/groups/no-such-group")
    assert group.status == 404 and "no consumer group named" in group.text
    assert get_once_coordinated(console.port, "/groups/").status == 404  # an empty group id
    bad = get(console.port, "/topics/__consumer_offsets?offset=abc")
    assert bad.status == 400 and "offset must be a whole number" in bad.text
    assert_short_page(bad)
    for query in ("offset=" + "9" * 30, "offset=-1", "offset=0&partition=" + "9" * 12,
                  "time=" + "9" * 30, "time=0001-01-01", "offset=" + "9" * 5000):
        reply = get(console.port, "/topics/__consumer_offsets?" + query)
        assert reply.status == 400, (query, reply.status)
        assert_short_page(reply)
    api = get(console.port, "/api/topics/no-such-topic")
    assert api.status == 404 and api.json() == {"error": "no topic named 'no-such-topic'"}


def test_binds_to_loopback_by_default(console) -> None:
    """The kernel's own table of listening sockets: the console's port on 127.0.0.1 only."""
    local = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                address, port = fields[1].rsplit(":", 1)
                if int(port, 16) == console.port and fields[3] == "0A":  # LISTEN
                    local.add(address)
    assert local == {"0100007F"}, local  # 127.0.0.1, little-endian hex


def test_a_cluster_that_does_not_answer(start_console) -> None:
    dead = start_console(f"{HOST}:{free_port()}", "--timeout", "1")
    reply = get(dead.port, "/topics")
    assert reply.status == 503 and "cannot reach" in reply.text
    assert_short_page(reply)
    assert get(dead.port, "/api/cluster").status == 503
    assert dead.proc is not None and dead.proc.poll() is None


def test_slow_clients_stall_neither_the_console_nor_the_broker(broker, console) -> None:
    """Clients that send half a request and wait hold only their own connections."""
    slow = []
    try:
        for _ in range(20):
            s = socket.create_connection((HOST, console.port), timeout=5)
            s.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            slow.append(s)
        started = time.monotonic()
        assert get(console.port, "/api/cluster", timeout=10).status == 200
        assert time.monotonic() - started < 5
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        started = time.monotonic()
        admin.list_topics(timeout=5)
        assert time.monotonic() - started < 5
        # and the console closes them once their request head is overdue
        for s in slow:
            s.settimeout(HEAD_TIMEOUT_S + 10)
            assert s.recv(1024) == b""  # closed without an answer
    finally:
        for s in slow:
            s.close()


class BrokenSource:
    """A source whose every call fails with an unexpected error carrying a secret."""

    def cluster(self) -> ClusterInfo:
        raise RuntimeError("secret-detail at /srv/strom/internal.py")

    def topics(self) -> list[TopicInfo]:
        raise RuntimeError("secret-detail")

    def topic(self, name: str) -> TopicInfo:
        raise RuntimeError("secret-detail")

    def groups(self) -> list[GroupSummary]:
        raise RuntimeError("secret-detail")

    def group(self, group_id: str) -> GroupInfo:
        raise RuntimeError("secret-detail")

    def recent(self, topic: TopicInfo) -> list[RecordView]:
        raise RuntimeError("secret-detail")

    def from_offset(self, topic: TopicInfo, partition: int, offset: int) -> list[RecordView]:
        raise RuntimeError("secret-detail")

    def from_time(self, topic: TopicInfo, timestamp_ms: int) -> list[RecordView]:
        raise RuntimeError("secret-detail")


@pytest.fixture
def broken_console() -> Iterator[int]:
    """The console's app over a failing source, served by uvicorn in a thread of this process."""
    port = free_port()
    server = make_server(create_app(BrokenSource(), History(1.0)), HOST, port)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)  # poll interval
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(15)


def test_an_internal_error_shows_no_traceback(broken_console: int) -> None:
    for path in ("/", "/topics", "/groups/x", "/api/cluster"):
        reply = get(broken_console, path)
        assert reply.status == 500, (path, reply.status)
        assert "secret-detail" not in reply.text and "RuntimeError" not in reply.text
        assert_short_page(reply)
    assert "Internal error" in get(broken_console, "/").text
