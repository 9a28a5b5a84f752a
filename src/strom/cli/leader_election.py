"""`strom leader-election`: move leadership back to preferred replicas (or elect an unclean
leader), like Kafka's kafka-leader-election.sh."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from strom.cli.common import (
    BootstrapOpt,
    ClientOptions,
    CommandConfigOpt,
    TimeoutOpt,
    UsageError,
    handle_errors,
    make_admin,
    print_table,
    result_of,
)


@handle_errors
def leader_election(
    preferred: Annotated[bool, typer.Option("--preferred", help="Elect each partition's "
                                            "preferred (first) replica.")] = False,
    unclean: Annotated[bool, typer.Option("--unclean", help="Elect any live replica where "
                                          "no leader is live (may lose data).")] = False,
    topic: Annotated[str | None, typer.Option("--topic", help="Only this topic.")] = None,
    partition: Annotated[int | None, typer.Option("--partition",
                                                  help="Only this partition (needs --topic).")
                         ] = None,
    all_topic_partitions: Annotated[bool, typer.Option(
        "--all-topic-partitions", help="Every partition of every topic.")] = False,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 30.0,
) -> None:
    """Run a leader election and show what happened per partition."""
    from confluent_kafka import ElectionType, TopicPartition

    if preferred == unclean:
        raise UsageError("choose one of --preferred and --unclean")
    if partition is not None and topic is None:
        raise UsageError("--partition needs --topic")
    if all_topic_partitions == (topic is not None):
        raise UsageError("choose --topic or --all-topic-partitions")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    admin, _ = make_admin(opts)
    wanted = None
    if topic is not None:
        md = admin.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            raise UsageError(f"unknown topic {topic}")
        parts = [partition] if partition is not None else sorted(md.partitions)
        wanted = [TopicPartition(topic, p) for p in parts]
    kind = ElectionType.PREFERRED if preferred else ElectionType.UNCLEAN
    # (confluent-kafka 2.16 rejects any keyword argument here: its binding has a bug)
    results = result_of(admin.elect_leaders(kind, wanted), opts)
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    for col in ("Topic", "Partition", "Result"):
        table.add_column(col)
    for tp, error in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        table.add_row(tp.topic, str(tp.partition), "elected" if error is None else error.name())
    print_table(table)
