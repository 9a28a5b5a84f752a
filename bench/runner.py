"""Run the scenarios round by round, the brokers alternating, each on fresh storage.

Round r: client ceiling, then for every scenario the subject, then each peer in turn (Tansu,
Kafka). Alternating within a round keeps each scenario's numbers close in time, so a noisy
neighbour hurts every broker alike.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.brokers import BrokerSpec
from bench.config import Sizes
from bench.report import Outcome
from bench.scenarios import Context, Scenario

CLIENT = "client"
KEEP_ENV = "STROM_BENCH_KEEP"  # set: the runs' storage and broker logs stay, for a look after


@dataclass
class Results:
    runs: dict[str, dict[str, list[Outcome]]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, scenario: str, who: str, outcome: Outcome) -> None:
        self.runs.setdefault(scenario, {}).setdefault(who, []).append(outcome)


def run(
    scenarios: Sequence[Scenario],
    subject: BrokerSpec,
    peers: BrokerSpec | Sequence[BrokerSpec],
    sizes: Sizes,
    rounds: int,
    log: Callable[[str], None],
) -> Results:
    others = [peers] if isinstance(peers, BrokerSpec) else list(peers)
    results = Results()
    workdir = Path(tempfile.mkdtemp(prefix="strom-bench-"))
    t_start = time.monotonic()
    try:
        for r in range(1, rounds + 1):
            for sc in scenarios:
                whos: list[BrokerSpec | None] = [subject, *others] if sc.needs_broker else [None]
                for spec in whos:
                    who = spec.label if spec else CLIENT
                    prefix = f"[round {r}/{rounds}] {sc.name} · {who}"
                    ctx = Context(
                        sizes=sizes, workdir=workdir, log=lambda m, p=prefix: log(f"{p}: {m}")
                    )
                    t0 = time.monotonic()
                    outcome = sc.run(spec, ctx)  # type: ignore[arg-type]
                    took = time.monotonic() - t0
                    if outcome.failed:
                        log(f"{prefix}: FAILED after {took:.1f} s: {outcome.failed}")
                    else:
                        log(f"{prefix}: done in {took:.1f} s")
                    results.add(sc.name, who, outcome)
    finally:  # every run's storage, deleted only now (see BrokerProcess.close)
        if os.environ.get(KEEP_ENV):
            log(f"keeping the runs' storage and broker logs in {workdir} ({KEEP_ENV})")
        else:
            log("deleting the runs' storage")
            shutil.rmtree(workdir, ignore_errors=True)
        results.seconds = time.monotonic() - t_start
    return results
