"""`strom console`: the web console (`strom.console`), a separate process that is a Kafka client.

It binds to 127.0.0.1 unless told otherwise, and starts even when the cluster is not up yet:
its pages then say that the cluster does not answer.
"""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from strom.cli.common import (
    BootstrapOpt,
    ClientOptions,
    CommandConfigOpt,
    TimeoutOpt,
    UsageError,
    handle_errors,
    out,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9405


@handle_errors
def console(
    host: Annotated[str, typer.Option("--host", help="Address to serve on (all interfaces: "
                                                     "0.0.0.0).")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option("--port", help="Port to serve on.", min=0,
                                      max=65535)] = DEFAULT_PORT,
    sample_interval: Annotated[float, typer.Option(
        "--sample-interval", help="Seconds between readings of offsets and lag for the charts "
                                  "(an hour of them is kept).", min=0.2)] = 10.0,
    bootstrap_server: BootstrapOpt = "localhost:9092",
    command_config: CommandConfigOpt = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Serve the web console: cluster, topics, records, consumer groups, an hour of charts."""
    from strom.console.app import create_app
    from strom.console.kafka import KafkaSource
    from strom.console.sampler import History, Sampler
    from strom.console.server import make_server

    if not host.strip():
        raise UsageError("--host must not be empty")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: "
                                                     "%(message)s")
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    source = KafkaSource(opts)
    history = History(sample_interval)
    sampler = Sampler(source.observe, history)
    app = create_app(source, history)
    server = make_server(app, host, port)
    shown = f"[{host}]" if ":" in host else host
    out.print(f"Strom console on http://{shown}:{port}/ for {bootstrap_server}", markup=False)
    sampler.start()
    try:
        server.run()
    finally:
        sampler.stop()
        source.close()
    if not server.started:  # the address was taken or refused: uvicorn logged why
        raise typer.Exit(1)
