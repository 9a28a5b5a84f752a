"""The lake writer (`iceberg.enable=true`): a process of its own (`python -m strom.lake`),
started, watched and stopped by the broker as the HTTP API's is (strom.broker.helper_process).

It reaches this broker as a Kafka client through a PLAINTEXT listener and gets the broker's
config on stdin. If it dies it is started again (an ERROR line says so): it resumes from what
its tables hold. When the broker stops, closing the process's stdin makes it commit what it has
read and exit; a broker killed with -9 takes it along the same way.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence

from strom.broker.core import Broker
from strom.broker.helper_process import HelperProcess
from strom.broker.server import BrokerServer
from strom.broker.wiring import StartupError
from strom.lake.settings import Handoff

log = logging.getLogger("strom.lake")

STOP_S = 30.0  # it commits what it holds before it exits


def _plaintext(servers: Sequence[BrokerServer]) -> BrokerServer:
    for server in servers:
        listener = server.security.listener
        if not listener.tls and not listener.sasl:
            return server
    raise StartupError("iceberg.enable=true needs a PLAINTEXT listener: the lake writer reads "
                       "the topics through it")


def start_lake_listener(broker: Broker, servers: Sequence[BrokerServer]) -> HelperProcess | None:
    config = broker.config
    if not config.get("iceberg.enable"):
        return None
    missing = [m for m in ("pyiceberg", "pyiceberg_core", "sqlalchemy", "pyarrow")
               if importlib.util.find_spec(m) is None]  # found, not imported
    if missing:
        raise StartupError(f"iceberg.enable=true needs {', '.join(missing)} installed "
                           "(pyiceberg[sql-sqlite,pyiceberg-core,pyarrow])")
    server = _plaintext(servers)
    host = "127.0.0.1" if server.host in ("", "0.0.0.0") else \
        "::1" if server.host == "::" else server.host
    shown = f"[{host}]" if ":" in host else host
    handoff = Handoff(config=dict(config.raw), bootstrap=f"{shown}:{server.port}",
                      registry_url=broker.info.registry_url)
    lake = HelperProcess("the lake writer's process", "strom.lake", handoff.to_line(), log,
                         stop_s=STOP_S)
    lake.start()
    return lake
