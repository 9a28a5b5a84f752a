"""kafka-transactions.sh (list, describe, describe-producers, find-hanging) on one Strom broker,
around a transaction a Python producer holds open."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from .. import clients as kc
from .tools import unique

pytestmark = pytest.mark.timeout(180)


def table(text: str) -> list[dict[str, str]]:
    """The tab-separated table kafka-transactions prints, one dict per row."""
    lines = [[cell.strip() for cell in line.split("\t")] for line in text.splitlines()]
    return [dict(zip(lines[0], row, strict=False)) for row in lines[1:]]


def test_open_then_committed_transaction(kafka_tools, strom_broker):
    bs = strom_broker.bootstrap
    topic, txn_id = unique("txn"), unique("tools-txn")
    kc.create_topic(bs, topic, 1)

    def txns(*args: str) -> str:
        return kafka_tools.run("kafka-transactions", "--bootstrap-server", bs, *args).stdout

    p = Producer({"bootstrap.servers": bs, "transactional.id": txn_id,
                  "transaction.timeout.ms": 45000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"v%d" % i, partition=0)
    assert p.flush(20) == 0

    listed = {r["TransactionalId"]: r for r in table(txns("list"))}
    assert listed[txn_id]["TransactionState"] == "Ongoing"
    assert listed[txn_id]["Coordinator"] == "0"
    producer_id = listed[txn_id]["ProducerId"]
    filtered = table(txns("list", "--transactional-id-pattern", f"{txn_id[:-4]}.*"))
    assert [r["TransactionalId"] for r in filtered] == [txn_id]

    [described] = table(txns("describe", "--transactional-id", txn_id))
    assert (described["ProducerId"], described["TransactionState"],
            described["TransactionTimeoutMs"], described["TopicPartitions"]) == (
        producer_id, "Ongoing", "45000", f"{topic}-0")

    [state] = table(txns("describe-producers", "--topic", topic, "--partition", "0"))
    assert (state["ProducerId"], state["LastSequence"], state["CurrentTransactionStartOffset"]) \
        == (producer_id, "2", "0")

    # The coordinator knows this transaction, so it does not hang, however old it is.
    for scope in (["--broker-id", "0"], ["--topic", topic]):
        out = txns("find-hanging", *scope, "--max-transaction-timeout", "0")
        assert out.splitlines()[0].split("\t")[0] == "Topic" and table(out) == [], out

    missing = kafka_tools.run("kafka-transactions", "--bootstrap-server", bs, "describe",
                              "--transactional-id", "no-such-txn", code=1)
    assert "the ID could not be found" in missing.stderr + missing.stdout

    p.commit_transaction(30)
    [described] = table(txns("describe", "--transactional-id", txn_id))
    assert (described["ProducerId"], described["TransactionState"]) == (
        producer_id, "CompleteCommit")
    [state] = table(txns("describe-producers", "--topic", topic, "--partition", "0"))
    assert state["CurrentTransactionStartOffset"] == "None"
    assert [m.value for m in kc.read_partition(bs, topic, isolation="read_committed")] == [
        b"v0", b"v1", b"v2"]
