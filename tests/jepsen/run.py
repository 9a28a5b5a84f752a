"""One run: topics, clients, nemesis, read-back, replicas, verdict — against any Target.

The run's topics (3 partitions, 3 replicas, min.insync.replicas=2): ``jepsen-in`` (the
idempotent producer's), ``jepsen-tx`` (the transactional producers') and ``jepsen-out`` (the
consume-transform-produce output); the group ``jepsen-group`` reads ``jepsen-in``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from ..integration.cluster.faults import replica_records, wait_for
from .checker import Result, check
from .history import History
from .nemesis import (
    HEALTHY_TIMEOUT,
    Nemesis,
    Target,
    Timing,
    fixed_plan,
    random_plan,
    wait_healthy,
)
from .workload import (
    CLIENT,
    TXN_TIMEOUT_MS,
    LiveReader,
    OffsetWatcher,
    Processor,
    TxnProducer,
    Worker,
    group_offsets,
    input_producer,
    input_writes,
    offsets_reader,
    read_final,
    settle,
)

IN, TX, OUT = "jepsen-in", "jepsen-tx", "jepsen-out"
TOPICS = (IN, TX, OUT)
GROUP = "jepsen-group"
# Broker settings both kinds of cluster get: open transactions of a dead producer are aborted
# within seconds of their timeout (Kafka's check runs every 10 s by default).
BROKER_SETTINGS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@dataclass(frozen=True)
class Settings:
    seed: int
    seconds: float  # the workload's time, faults included
    kills_each: int | None = 3  # a fixed plan: this many kills of each role; None: random faults
    partitions_cut: int = 1  # network partitions in a fixed plan
    min_committed: int = 0  # go on (within `seconds`) until this many transactions committed
    tx_producers: int = 2
    txn_interval: float = 0.1  # seconds between one producer's transactions
    processors: int = 2
    input_rate: int = 30  # records/s into the input topic
    partitions: int = 3
    abort_ratio: float = 0.1
    timing: Timing = field(default_factory=Timing)


@dataclass
class Report:
    target: str
    settings: Settings
    result: Result
    faults: Counter[str]
    failovers: int  # faults after which the victim's role moved to another broker
    missed: list[str]
    client_errors: list[str]
    elapsed: float
    unhealed: list[str] = field(default_factory=list)  # see Nemesis.unhealed

    @property
    def crashed(self) -> list[str]:
        """Client threads that died of an exception or never stopped: shown, and the run
        fails (a client hung on a broker that never answers is a finding too)."""
        return [e for e in self.client_errors if " crashed: " in e or " stuck: " in e]

    def committed_transactions(self) -> int:
        return self.result.stats["txn_committed"]

    def summary(self) -> str:
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [f"jepsen on {self.target}: seed {self.settings.seed}, "
                 f"{self.elapsed:.0f} s; faults: {faults} ({self.failovers} failed over)"]
        if self.missed:
            lines.append(f"faults skipped (no broker found for the role): {self.missed}")
        if self.unhealed:
            lines.append(f"faults after which the cluster was not whole again within "
                         f"{HEALTHY_TIMEOUT:.0f} s: {self.unhealed}")
        lines.append(f"client errors seen (expected under faults): {len(self.client_errors)}")
        lines.append(self.result.summary())
        return "\n".join(lines)


def committed(workers: list[Worker]) -> int:
    return sum(w.committed() for w in workers)


def create_topics(admin: AdminClient, target: Target, partitions: int,
                  timeout: float = 60.0) -> None:
    """The test's topics, once every broker is registered: the controller may count the
    brokers a moment after the bootstrap broker does (INVALID_REPLICATION_FACTOR: asked
    again until `timeout`)."""
    wait_healthy(target, timeout)
    deadline = time.monotonic() + timeout
    left = list(TOPICS)
    while left:
        futures = admin.create_topics([NewTopic(t, partitions, 3,
                                                config={"min.insync.replicas": "2"})
                                       for t in left], operation_timeout=30)
        retry = []
        for topic, future in futures.items():
            try:
                future.result(40)
            except KafkaException as e:
                code = e.args[0].code() if e.args else None
                if code == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                if code != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                    raise
                retry.append(topic)
        left = retry
        if left:
            time.sleep(0.2)  # poll interval, not synchronisation


def run(target: Target, settings: Settings, log: Callable[[str], None] = print,
        history_path: Path | None = None) -> Report:
    t0 = time.monotonic()

    def say(line: str) -> None:
        log(f"[{time.monotonic() - t0:5.1f} s] {line}")

    rng = random.Random(settings.seed)
    bootstrap = target.bootstrap()
    admin = AdminClient({**CLIENT, "bootstrap.servers": bootstrap})
    n = settings.partitions
    create_topics(admin, target, n)
    if not wait_healthy(target, 60):
        raise RuntimeError(f"{target.name}: the topics never got full ISRs")

    inp = input_producer(bootstrap, IN, n, settings.input_rate)
    txns: list[Worker] = [TxnProducer(f"jepsen-tx-{i}", bootstrap, TX, n, rng.randrange(2**32),
                                      settings.abort_ratio, settings.txn_interval)
                          for i in range(settings.tx_producers)]
    txns += [Processor(f"jepsen-ctp-{i}", bootstrap, GROUP, IN, OUT)
             for i in range(settings.processors)]
    watcher = OffsetWatcher(bootstrap, GROUP, IN, n)
    live = LiveReader(bootstrap, [TX, OUT], n)
    inp.start()
    for w in (*txns, watcher, live):
        w.start()
    until = time.monotonic() + settings.seconds
    wait_for(lambda: committed(txns) >= 10, min(60.0, settings.seconds), "first transactions")
    say(f"workload running: {committed(txns)} transactions committed")

    nemesis = Nemesis(target, rng, [w.name for w in txns], GROUP, TX, n, settings.timing, say,
                      moment=_after_a_commit(txns, rng))
    if settings.kills_each is not None:
        plan = fixed_plan(rng, settings.kills_each, settings.partitions_cut)
        nemesis.play(plan, until)
    else:
        nemesis.play(random_plan(rng, target.can_partition), until)
    while committed(txns) < settings.min_committed and time.monotonic() < until:
        time.sleep(0.5)  # poll interval, not synchronisation
    say(f"stopping the workload: {committed(txns)} transactions committed")

    workers = (*txns, watcher, live)
    for w in workers:  # all at once: they finish their current step side by side
        w.ask_stop()
    unanswered = inp.stop(60)
    deadline = time.monotonic() + 60
    for w in workers:
        w.stop(max(1.0, deadline - time.monotonic()))
    for node in target.node_ids:
        if not target.running(node):
            target.restart(node)
    wait_healthy(target, 60, say)
    history = History(input_topic=IN)
    say("workload stopped; reading everything back")
    history.hanging = settle(admin, [TX, OUT], n, timeout=3 * TXN_TIMEOUT_MS / 1000)
    history.reads = read_final(bootstrap, list(TOPICS), n) + live.reads
    reader = offsets_reader(bootstrap, GROUP)
    try:
        history.final_offsets = group_offsets(reader, IN, n)
    finally:
        reader.close()
    history.writes = input_writes(inp) + [x for w in txns for x in w.history()]
    history.offset_commits = [c for w in txns if isinstance(w, Processor) for c in w.commits]
    history.offset_reads = watcher.reads
    wait_healthy(target, 30, say)  # the followers have caught up before the files are compared
    target.stop_all()
    history.replicas = {
        f"{t}-{p}": {f"broker-{node}": replica_records(target.replica_dir(node, t, p))
                     for node in target.node_ids}
        for t in TOPICS for p in range(n)}
    if history_path is not None:
        history.dump(history_path)
    errors = [e for w in workers for e in w.errors]
    if unanswered:
        errors.append(f"input producer: {unanswered} records without a delivery report")
    failovers = sum(e.note.startswith("moved") for e in nemesis.events)
    return Report(target.name, settings, check(history), nemesis.counts(), failovers,
                  nemesis.missed, errors, time.monotonic() - t0, nemesis.unhealed)


def _after_a_commit(workers: list[Worker], rng: random.Random
                    ) -> Callable[[str, str | int], None]:
    """Strike right after a commit returned, where a write not yet replicated would be lost:
    the transaction coordinator after its own producer's commit, the group coordinator after
    a consume-transform-produce commit (TxnOffsetCommit), the rest after any commit."""
    by_name = {w.name: w for w in workers}
    processors = [w for w in workers if isinstance(w, Processor)] or workers

    def moment(fault: str, key: str | int) -> None:
        if fault == "kill-txn" and str(key) in by_name:
            by_name[str(key)].next_commit(5.0)
        elif fault == "kill-group":
            rng.choice(processors).next_commit(5.0)
        else:
            rng.choice(workers).next_commit(5.0)

    return moment
