"""`strom consume --share-group` and `strom groups` on share groups (KIP-932), run as a user runs
them (subprocesses) against a real broker: accept, release and reject, SIGTERM committing and
leaving, and the groups listed and described with their start offsets and lag."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid

import pytest

from .broker import STROM_BIN
from .test_cli import T, strom

pytestmark = pytest.mark.timeout(240)


def consume(bs: str, topic: str, group: str, n: int, *extra: str) -> list[dict]:
    proc = strom(bs, "consume", topic, "--share-group", group, "--format", "json",
                 "--max-messages", str(n), "--timeout-ms", "20000", *extra)
    records = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert proc.stderr.decode().strip().endswith(f"Processed a total of {len(records)} messages")
    return records


def seen(records: list[dict]) -> list[tuple[int, str, int]]:
    return [(r["offset"], r["value"], r["delivery_count"]) for r in records]


@pytest.fixture
def share_topic(strom_broker) -> tuple[str, str, str]:
    """(bootstrap, topic, group): a 1-partition topic and a share group reading it from the start."""
    bs = strom_broker.bootstrap
    topic, group = f"share-cli-{uuid.uuid4().hex[:8]}", f"share-cli-g-{uuid.uuid4().hex[:8]}"
    strom(bs, "topics", "create", topic, "--partitions", "1")
    strom(bs, "configs", "alter", "--group", group, "--add-config", "share.auto.offset.reset=earliest")
    return bs, topic, group


def test_accept_release_reject(share_topic) -> None:
    bs, topic, group = share_topic
    strom(bs, "produce", topic, input=b"a\nb\nc\n")
    # released: delivered again (delivery count 2); rejected: never again; accepted: once.
    # (b and c come with a's batch and are released unprinted past --max-messages 1, twice.)
    assert seen(consume(bs, topic, group, 1, "--release")) == [(0, "a", 1)]
    assert seen(consume(bs, topic, group, 1, "--reject")) == [(0, "a", 2)]
    assert seen(consume(bs, topic, group, 2)) == [(1, "b", 3), (2, "c", 3)]
    strom(bs, "produce", topic, input=b"marker\n")
    assert seen(consume(bs, topic, group, 1)) == [(3, "marker", 1)]


def test_text_output_and_records_past_max_messages_go_back(share_topic) -> None:
    bs, topic, group = share_topic
    strom(bs, "produce", topic, input=b"x\ny\nz\n")  # one batch: one poll returns all three
    proc = strom(bs, "consume", topic, "--share-group", group, "--max-messages", "1",
                 "--print-offset", "--timeout-ms", "20000")
    assert proc.stdout == b"Offset:0\tx\n"
    assert seen(consume(bs, topic, group, 2)) == [(1, "y", 2), (2, "z", 2)]  # released


def test_sigterm_commits_and_leaves(share_topic) -> None:
    bs, topic, group = share_topic
    argv = [str(STROM_BIN), "consume", topic, "--share-group", group, "--format", "json",
            "--bootstrap-server", bs]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    try:
        strom(bs, "produce", topic, input=b"p\nq\n")
        lines = [json.loads(proc.stdout.readline()) for _ in range(2)]  # blocks until printed
        assert seen(lines) == [(0, "p", 1), (1, "q", 1)]
        listed = strom(bs, "groups", "list", "--type", "share", "--state", "Stable").stdout.decode()
        assert group in listed and "share" in listed
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=T)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr  # SIGTERM: a requested stop (Ctrl-C exits 130)
    assert stderr.decode().strip().endswith("Processed a total of 2 messages")
    # the member left, and what it printed was accepted: nothing comes back
    state = strom(bs, "groups", "describe", group, "--state").stdout.decode()
    assert "Empty" in state and "share" in state
    strom(bs, "produce", topic, input=b"marker\n")
    assert seen(consume(bs, topic, group, 1)) == [(2, "marker", 1)]
    described = strom(bs, "groups", "describe", group).stdout.decode().splitlines()
    assert described[0] == f"Share group '{group}' has no active members."
    assert described[1].split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert described[2].split() == [group, topic, "0", "3", "0"]


def test_usage_errors(strom_broker) -> None:
    bs = strom_broker.bootstrap
    for extra in (["--from-beginning"], ["--group", "g"], ["--partition", "0"], ["--exit-at-end"]):
        proc = strom(bs, "consume", "t", "--share-group", "g", *extra, check=False)
        assert proc.returncode == 2 and b"cannot be used together" in proc.stderr, proc.stderr
    proc = strom(bs, "consume", "t", "--reject", check=False)
    assert proc.returncode == 2 and b"need --share-group" in proc.stderr
    proc = strom(bs, "consume", "t", "--share-group", "g", "--reject", "--release", check=False)
    assert proc.returncode == 2 and b"cannot be used together" in proc.stderr
