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
    CliError,
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
    registry_url: Annotated[str | None, typer.Option(
        "--registry-url", help="A schema registry (Confluent's API, e.g. Strom's at "
                               "http://localhost:8081): topic pages show their subjects, "
                               "schemas and validation settings.")] = None,
    rest_url: Annotated[str | None, typer.Option(
        "--rest-url", help="Strom's HTTP API (e.g. http://localhost:8082): the console links "
                           "to its OpenAPI document, and each topic page to the topic's "
                           "records and live event stream over HTTP.")] = None,
) -> None:
    """Serve the web console: cluster, topics, records, consumer groups, an hour of charts."""
    from strom.console.app import create_app
    from strom.console.kafka import KafkaSource
    from strom.console.sampler import History, Sampler
    from strom.console.schemas import RegistryReader
    from strom.http.server import bind, make_server

    if not host.strip():
        raise UsageError("--host must not be empty")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: "
                                                     "%(message)s")
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise CliError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
    opts = ClientOptions(bootstrap_server, command_config, timeout)
    try:
        source = KafkaSource(opts)
    except BaseException:
        sock.close()
        raise
    history = History(sample_interval)
    sampler = Sampler(source.observe, history)
    app = create_app(source, history,
                     registry=RegistryReader(registry_url, timeout) if registry_url else None,
                     rest_url=rest_url.rstrip("/") if rest_url else None)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    out.print(f"Strom console on http://{shown}:{bound_port}/ for {bootstrap_server}",
              markup=False)
    server = make_server(app, host, bound_port, access_log="console")
    sampler.start()
    try:
        server.run(sockets=[sock])
    finally:
        sampler.stop()
        source.close()
        sock.close()
