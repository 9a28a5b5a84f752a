"""``python -m tests.jepsen``: the Jepsen-style run against Apache Kafka 4.4 (`make jepsen-kafka`).

JEPSEN_SECONDS (default 120) of random faults: kills of the transaction coordinator, the group
coordinator and partition leaders (a quarter restarted at once), and network partitions (each node in a network namespace
of its own; kills only where namespaces cannot be made). JEPSEN_SEED repeats a run (else a
random seed, printed).
Exit code 0 when the checker finds no anomaly; a failed run keeps its directory (the nodes'
logs and data, history.json; its path is printed).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys

from ..integration.cluster.netns import NetnsLab, NetnsUnavailable
from .kafka import KAFKA_SETTINGS, KafkaCluster, deployment_args, load_run_broker
from .nemesis import Timing
from .run import BROKER_SETTINGS, Settings, run


def main() -> int:
    seconds = float(os.environ.get("JEPSEN_SECONDS") or 120)
    seed = int(os.environ.get("JEPSEN_SEED") or random.SystemRandom().randrange(10**6))
    print(f"jepsen seed {seed} (JEPSEN_SEED={seed} repeats this run), {seconds:.0f} s",
          flush=True)
    run_broker = load_run_broker()
    libs = run_broker.kafka_dist.ensure_libs()
    lab: NetnsLab | None = None
    try:
        lab = NetnsLab(3)
        lab.create()
    except NetnsUnavailable as e:
        print(f"no network namespaces ({e}): the nemesis only kills", flush=True)
        lab = None
    try:
        with lab.entered() if lab is not None else contextlib.nullcontext():
            deployment = run_broker.Deployment(
                "kafka-cluster", kafka_libs=libs, keep=True,
                overrides={**BROKER_SETTINGS, **KAFKA_SETTINGS},
                **(deployment_args(lab) if lab is not None else {}))
            with deployment:
                settings = Settings(seed, seconds, kills_each=None, timing=Timing(quick=0.25))
                report = run(KafkaCluster(deployment, lab), settings,
                             log=lambda line: print(line, flush=True),
                             history_path=deployment.work / "history.json")
                deployment.keep = not report.result.valid or bool(report.crashed)
    finally:
        if lab is not None:
            lab.destroy()
    print(report.summary(), flush=True)
    return 1 if deployment.keep else 0


if __name__ == "__main__":
    sys.exit(main())
