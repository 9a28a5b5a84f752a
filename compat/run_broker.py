"""Start one throwaway broker, run a command against it, stop the broker by its PID.

Used by `make compat-java` (Strom) and `make compat-kafka` (Apache Kafka 4.4 from Maven Central's
jars) so the same Java suite runs against both. Standard library only.

    python compat/run_broker.py strom --strom .venv/bin/strom -- mvn test -Dbootstrap={bootstrap}
    python compat/run_broker.py kafka --kafka-libs ~/.cache/.../libs -- mvn test -Dbootstrap={bootstrap}

``{bootstrap}`` in the command is replaced by ``127.0.0.1:<port>``; the command also gets it as
``$BOOTSTRAP``. The exit code is the command's. The broker's log is printed (tail) when the command
fails, and its temp directory is removed afterwards unless ``--keep`` is given.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HOST = "127.0.0.1"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
# Overrides both brokers get: the suite creates its own topics and wants groups to form at once.
COMMON = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}
# kafka-server-start.sh's heap and kafka-run-class.sh's GC flags.
KAFKA_JVM = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true"]  # fmt: skip
# setpriv execs the broker with "SIGTERM me when my parent dies", so a killed run leaves no broker.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "TERM", "--"] if _SETPRIV else []


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def api_versions_ok(port: int) -> bool:
    """True when the broker answers ApiVersions v0 with error code 0: the readiness probe."""
    client_id = b"run_broker"
    body = struct.pack(">hhih", 18, 0, 1, len(client_id)) + client_id
    try:
        with socket.create_connection((HOST, port), timeout=2.0) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _read_exact(s, 4)
            payload = _read_exact(s, struct.unpack(">i", head)[0])
    except (OSError, EOFError, struct.error):
        return False
    correlation, error = struct.unpack(">ih", payload[:6])
    return correlation == 1 and error == 0


def _read_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return buf


def strom_command(strom: str, port: int, work: Path, overrides: dict[str, str]) -> list[str]:
    """`strom broker` with its listener, log dir and the overrides on the command line."""
    settings = {
        "listeners": f"PLAINTEXT://{HOST}:{port}",
        "log.dirs": str(work / "data"),
        **overrides,
    }
    cmd = [strom, "broker"]
    for key, value in settings.items():
        cmd += ["--override", f"{key}={value}"]
    return cmd


def kafka_command(libs: Path, port: int, work: Path, overrides: dict[str, str]) -> list[str]:
    """Write a single-node KRaft server.properties, format its log dir, return the start command."""
    controller = free_port()
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(work / "data"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        **overrides,
    }
    config = work / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    java = shutil.which("java", path=os.path.join(os.environ["JAVA_HOME"], "bin")) if os.environ.get(
        "JAVA_HOME") else shutil.which("java")  # fmt: skip
    if not java:
        raise SystemExit("run_broker: no java on PATH (or in $JAVA_HOME/bin)")
    classpath = f"{libs}/*"
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    fmt = [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "--standalone",
           "-t", cluster_id, "-c", str(config)]  # fmt: skip
    done = subprocess.run(fmt, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"run_broker: kafka storage format failed:\n{done.stdout}{done.stderr}")
    return [java, *KAFKA_JVM, "-cp", classpath, "kafka.Kafka", str(config)]


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Poll ApiVersions until the broker answers; fail at once if the process dies."""
    deadline = time.monotonic() + START_TIMEOUT
    while not api_versions_ok(port):
        if proc.poll() is not None:
            raise SystemExit(f"run_broker: broker exited with {proc.returncode}\n{tail(log)}")
        if time.monotonic() > deadline:
            stop(proc)
            raise SystemExit(f"run_broker: broker not serving after {START_TIMEOUT}s\n{tail(log)}")
        time.sleep(0.2)  # poll interval, not synchronisation


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM by PID, then SIGKILL if it does not exit in time."""
    if proc.poll() is not None:
        return
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(STOP_TIMEOUT)


def tail(log: Path, lines: int = 60) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no broker log)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(usage="run_broker.py {strom,kafka} [options] -- command ...")
    parser.add_argument("kind", choices=["strom", "kafka"])
    parser.add_argument("--strom", default=str(Path(sys.executable).with_name("strom")))
    parser.add_argument("--kafka-libs", type=Path, help="directory with Kafka's broker jars")
    parser.add_argument("--override", action="append", default=[], help="key=value (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the broker's temp directory")
    if "--" not in argv:
        parser.error("no command given after --")
    split = argv.index("--")
    args = parser.parse_args(argv[:split])
    args.command = argv[split + 1 :]
    if not args.command:
        parser.error("no command given after --")
    if args.kind == "kafka" and not args.kafka_libs:
        parser.error("kafka needs --kafka-libs")
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    overrides = dict(COMMON)
    overrides.update(kv.split("=", 1) for kv in args.override)
    work = Path(tempfile.mkdtemp(prefix=f"compat-{args.kind}-"))
    port = free_port()
    bootstrap = f"{HOST}:{port}"
    if args.kind == "strom":
        cmd = strom_command(str(Path(args.strom).resolve()), port, work, overrides)
    else:
        cmd = kafka_command(args.kafka_libs.expanduser(), port, work, overrides)
    log = work / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*_DIE_WITH_PARENT, *cmd], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=work)  # fmt: skip
    rc = 1
    try:
        wait_ready(proc, port, log)
        print(f"run_broker: {args.kind} broker pid {proc.pid} serving on {bootstrap}", flush=True)
        command = [part.replace("{bootstrap}", bootstrap) for part in args.command]
        rc = subprocess.run(command, env={**os.environ, "BOOTSTRAP": bootstrap}).returncode
        if rc != 0:
            print(f"run_broker: command exited {rc}; broker log tail ({log}):\n{tail(log)}")
    finally:
        stop(proc)
        if args.keep or rc != 0:
            print(f"run_broker: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
