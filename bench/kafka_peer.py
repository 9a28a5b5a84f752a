"""The Apache Kafka 4.4 peer: one KRaft node (broker and controller) from Maven Central's jars.

The jars, the JVM flags of Kafka's start scripts and the java lookup come from
compat/kafka_dist.py, which `make compat-kafka` and the Kafka tools tests use too (fetched with
Maven on first use, cached in ~/.cache/strom-compat). The broker runs with the settings of the
``config/server.properties`` that Kafka's distribution ships for a single combined node, changed
only where a run must differ: its listeners (the run's port and a free controller port) and its
log directory, formatted with Kafka's storage tool before the first start. A run over SSL makes
the run's port an SSL listener with a PEM key store and keeps PLAINTEXT, the inter-broker
listener of the shipped config, on another free port.
"""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import uuid
from pathlib import Path
from types import ModuleType

from bench.brokers import BrokerError, BrokerSpec, free_port
from bench.tls import TlsFiles

HOST = "127.0.0.1"
_DIST = Path(__file__).resolve().parent.parent / "compat" / "kafka_dist.py"
FORMAT_TIMEOUT = 120.0

# Kafka 4.4's config/server.properties (the single-node KRaft sample of its distribution),
# every setting but node.id, the listeners, the quorum's address and log.dirs, which
# :func:`server_properties` fills in per run. The replication factors of 1 are what make the
# internal topics (__consumer_offsets, ...) possible on one node.
SHIPPED_DEFAULTS: dict[str, str] = {
    "process.roles": "broker,controller",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": (
        "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    ),
    "num.network.threads": "3",
    "num.io.threads": "8",
    "socket.send.buffer.bytes": "102400",
    "socket.receive.buffer.bytes": "102400",
    "socket.request.max.bytes": "104857600",
    "num.partitions": "1",
    "num.recovery.threads.per.data.dir": "1",
    "offsets.topic.replication.factor": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "log.retention.hours": "168",
    "log.segment.bytes": "1073741824",
    "log.retention.check.interval.ms": "300000",
}


def load_dist() -> ModuleType:
    """compat/kafka_dist.py, by path: compat/ is a directory of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("compat_kafka_dist", _DIST)
    if spec is None or spec.loader is None:
        raise BrokerError(f"cannot load {_DIST}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def server_properties(
    port: int,
    controller_port: int,
    log_dir: Path,
    node_id: int = 1,
    tls: TlsFiles | None = None,
    plaintext_port: int | None = None,
) -> str:
    """The run's server.properties: the shipped settings plus its listeners and log directory.

    With ``tls`` the clients' listener on ``port`` is SSL, its key and certificate read from the
    PEM key store ``tls.keystore`` (KIP-651: ``ssl.keystore.type=PEM``; an unencrypted key, so
    no ``ssl.key.password``). The inter-broker listener of the shipped config, PLAINTEXT, then
    listens on ``plaintext_port``; ``listener.security.protocol.map`` already maps SSL to SSL.
    """
    listeners = [f"PLAINTEXT://{HOST}:{port}"]
    ssl: dict[str, str] = {}
    if tls is not None:
        if plaintext_port is None:
            raise ValueError("an SSL run needs a plaintext_port for the inter-broker listener")
        listeners = [f"SSL://{HOST}:{port}", f"PLAINTEXT://{HOST}:{plaintext_port}"]
        ssl = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(tls.keystore)}
    listeners.append(f"CONTROLLER://{HOST}:{controller_port}")
    props = {
        **SHIPPED_DEFAULTS,
        "node.id": str(node_id),
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}",
        "listeners": ",".join(listeners),
        "advertised.listeners": ",".join(listeners),
        "log.dirs": str(log_dir),
        **ssl,
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def cluster_id() -> str:
    """A fresh cluster id in Kafka's form (a UUID, URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def broker_command(java: str, libs: Path, config: Path) -> list[str]:
    """``kafka-server-start.sh config`` without the script: its heap and JVM flags, kafka.Kafka."""
    dist = load_dist()
    return [java, *dist.KAFKA_HEAP, *dist.KAFKA_GC, "-cp", f"{libs}/*", "kafka.Kafka", str(config)]


def format_command(java: str, libs: Path, config: Path, cid: str) -> list[str]:
    """``kafka-storage.sh format --standalone``: a one-voter quorum of this node."""
    return [java, "-cp", f"{libs}/*", "kafka.tools.StorageTool", "format", "--standalone",
            f"--cluster-id={cid}", "-c", str(config)]  # fmt: skip (= : an id may start with -)


def kafka_spec(label: str = "Kafka", log=print) -> BrokerSpec:
    """A BrokerSpec for Kafka 4.4, fetching its jars first if they are not cached yet."""
    dist = load_dist()
    if not dist.is_cached():
        log(f"fetching Apache Kafka {dist.KAFKA_VERSION}'s jars from Maven Central (once)")
    try:
        libs = Path(dist.ensure_libs())
        java = dist.java_bin()
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        raise BrokerError(f"Kafka peer unavailable: {e}") from e

    def config_path(data_dir: Path) -> Path:
        return data_dir / "server.properties"

    def prepare(port: int, data_dir: Path, tls: TlsFiles | None = None) -> None:
        config = config_path(data_dir)
        plaintext_port = free_port() if tls is not None else None
        props = server_properties(
            port, free_port(), data_dir / "logs", tls=tls, plaintext_port=plaintext_port
        )
        config.write_text(props)
        fmt = format_command(java, libs, config, cluster_id())
        try:
            done = subprocess.run(fmt, capture_output=True, text=True, timeout=FORMAT_TIMEOUT,
                                  stdin=subprocess.DEVNULL)  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise BrokerError(f"kafka storage format took over {FORMAT_TIMEOUT:.0f} s") from e
        if done.returncode != 0:
            raise BrokerError(f"kafka storage format failed:\n{done.stdout}{done.stderr}")

    def command(port: int, data_dir: Path, tls: TlsFiles | None = None) -> list[str]:
        return broker_command(java, libs, config_path(data_dir))  # tls: in the config

    return BrokerSpec(
        label=label,
        kind="kafka",
        command=command,
        persistent=True,
        version=f"kafka {dist.KAFKA_VERSION}",
        notes="disk storage, JVM heap 1 GiB",
        prepare=prepare,
        ready_marker=None,
    )
