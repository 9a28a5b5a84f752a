"""Run a real ``strom broker`` process for integration tests.

The broker is started exactly as a user would start it (the ``strom`` console script of this venv),
is judged ready only when it answers ApiVersions on its port, and is always stopped by its own PID.

Setting ``STROM_IT_PEER_TANSU=/path/to/tansu`` runs the Tansu binary instead (memory storage, overrides
ignored). That exists only to check the tests themselves against another Kafka-compatible broker.

``kraft=True`` (or ``STROM_IT_KRAFT=1`` for every single broker of a run: ``make test-kraft``) runs
the broker as a combined KRaft node on a quorum of itself (``process.roles=broker,controller``, a
CONTROLLER listener on a port of its own), its data directory formatted with ``strom storage
format`` before the first start, as ``make run`` does.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .wire import api_versions_ok

HOST = "127.0.0.1"
STROM_BIN = Path(sys.executable).with_name("strom")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
PEER_ENV = "STROM_IT_PEER_TANSU"
KRAFT_ENV = "STROM_IT_KRAFT"

# If the test process dies without cleaning up (a segfault in a client library, SIGKILL), the broker
# gets SIGTERM from the kernel instead of lingering. setpriv execs the broker, so the PID stays its own.
_SETPRIV = shutil.which("setpriv")
_DIE_WITH_PARENT = [_SETPRIV, "--pdeathsig", "TERM", "--"] if _SETPRIV else []

# Every broker object that ever started a process in this session (logs for failure reports and a
# last-resort kill at interpreter exit).
ALL_BROKERS: list[BrokerProcess] = []


class BrokerStartError(RuntimeError):
    pass


def _load_ports():
    path = Path(__file__).resolve().parents[2] / "compat" / "ports.py"
    spec = importlib.util.spec_from_file_location("compat_ports", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_ports = _load_ports()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that no process of this test run
    has handed out before (compat/ports.py): the kernel may offer a just-released port again,
    and two brokers of one cluster started together then collide (seen in CI: "Address already
    in use"); under pytest-xdist each worker hands out ports from a range of its own."""
    return _ports.free_port(HOST)


def running_peer() -> str | None:
    """Name of the stand-in broker when the suite is pointed at one, else None."""
    return "tansu" if os.environ.get(PEER_ENV) else None


KRAFT_TEST_CLUSTER_ID = "kraft-it-cluster-0000A"  # every KRaft node the tests format


class BrokerProcess:
    """One broker process with a fixed port and data directory across restarts."""

    def __init__(
        self,
        base_dir: Path | str | None = None,
        *,
        data_dir: Path | str | None = None,
        port: int | None = None,
        name: str = "broker",
        kraft: bool | None = None,
    ) -> None:
        self.base_dir = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="strom-it-"))
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = Path(data_dir) if data_dir else self.base_dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.base_dir / f"{name}.log"
        self.name = name
        self.port = port or free_port()
        self.overrides: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.kraft = os.environ.get(KRAFT_ENV) == "1" if kraft is None else kraft
        self.controller_port = free_port() if self.kraft else None
        self.add_scram: list[str] = []  # `strom storage format --add-scram` arguments (KRaft)

    # ------------------------------------------------------------------ properties

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return self.wait_metrics_url()

    def wait_metrics_url(self, timeout: float = 10.0) -> str:
        """The metrics endpoint of the running broker, from its start-up line."""
        return self.started_url("metrics", timeout)

    def started_url(self, what: str, timeout: float = 10.0) -> str:
        """An HTTP endpoint's address from this start's start-up line ("<what> at URL", printed
        once it serves: polled for up to ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            last = self.log_path.read_text(errors="replace").rsplit("=== start #", 1)[-1]
            found = re.search(rf"{what} at (https?://[^\s,]+)", last)
            if found is not None:
                return found.group(1)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} printed no {what} endpoint ({self.log_path})")
            time.sleep(0.05)  # poll interval, not synchronisation

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self) -> list[str]:
        peer = os.environ.get(PEER_ENV)
        if peer:
            url = f"tcp://{HOST}:{self.port}"
            return [peer, "broker", "--listener-url", url, "--advertised-listener-url", url,
                    "--storage-engine", "memory://tansu/"]  # fmt: skip
        cmd = [str(STROM_BIN), "broker"]
        # metrics on, on a port of the OS's choosing (brokers of a cluster share the host)
        settings = {"listeners": f"PLAINTEXT://{HOST}:{self.port}", "log.dirs": str(self.data_dir),
                    "metrics.listener": f"http://{HOST}:0"}
        settings.update(self.overrides)
        if self.kraft and "zookeeper.connect" not in settings:
            settings.update(self.kraft_settings(settings))
        for key, value in settings.items():  # "{port}" in a value: this broker's own port
            cmd += ["--override", f"{key}={value.replace('{port}', str(self.port))}"]
        return cmd

    def kraft_settings(self, settings: dict[str, str]) -> dict[str, str]:
        """The combined KRaft node's settings on top of `settings` (its broker listeners)."""
        node_id = settings.get("node.id", settings.get("broker.id", "0"))
        controller = f"CONTROLLER://{HOST}:{self.controller_port}"
        voters = settings.get("controller.quorum.voters") or \
            f"{node_id}@{HOST}:{self.controller_port}"  # a quorum of itself unless named
        out = {"process.roles": "broker,controller", "node.id": node_id,
               "controller.quorum.voters": voters,
               "controller.listener.names": "CONTROLLER",
               "listeners": f"{settings['listeners']},{controller}"}
        # Kafka maps the controller listener to PLAINTEXT by itself only while no listener is
        # named after TLS or SASL; otherwise the map must name it (as an operator's would)
        protocols = settings.get("listener.security.protocol.map") or \
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
        if "CONTROLLER:" not in protocols:
            out["listener.security.protocol.map"] = f"{protocols},CONTROLLER:PLAINTEXT"
        return out

    def format_storage(self) -> None:
        """``strom storage format`` of the data directory for this KRaft node (first start)."""
        if (self.data_dir / "meta.properties").exists():
            return
        config = self.base_dir / "format.properties"
        settings = {"listeners": f"PLAINTEXT://{HOST}:{self.port}", "log.dirs": str(self.data_dir)}
        settings.update(self.overrides)
        settings.update(self.kraft_settings(settings))
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        # `strom storage format`'s code, in this process: a new interpreter per node would
        # cost a second of CPU each time a cluster starts
        from strom.cli.storage import FormatOptions, format_storage

        format_storage(FormatOptions(config, KRAFT_TEST_CLUSTER_ID, ignore_formatted=True,
                                     add_scram=list(self.add_scram)))

    # ------------------------------------------------------------------ lifecycle

    def start(self, overrides: dict[str, object] | None = None, timeout: float = START_TIMEOUT,
              *, wait: bool = True):
        """Start the process (``overrides`` are Kafka config names) and wait until it serves
        (unless ``wait`` is false: then call wait_ready, e.g. after starting several)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        if overrides is not None:
            self.overrides = {k: str(v) for k, v in overrides.items()}
        self.starts += 1
        if self.kraft and "zookeeper.connect" not in self.overrides:
            self.format_storage()
        with open(self.log_path, "ab") as log:
            log.write(f"=== start #{self.starts}: {' '.join(self.command())}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [*_DIE_WITH_PARENT, *self.command()], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.base_dir,
            )  # fmt: skip
        if self not in ALL_BROKERS:
            ALL_BROKERS.append(self)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Poll ApiVersions until it succeeds; fail early if the process dies."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"{self.name} exited with {self.proc.returncode} before serving\n{self.log_tail()}"
                )
            if api_versions_ok(self.bootstrap, timeout=1.0):
                return
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(
                    f"{self.name} not serving on {self.bootstrap} after {timeout}s\n{self.log_tail()}"
                )
            time.sleep(0.05)  # poll interval, not synchronisation

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait, then SIGKILL by PID. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._append_log(f"=== no exit {timeout}s after SIGTERM: SIGKILL\n")
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(STOP_TIMEOUT)
        return self.proc.returncode

    def kill(self) -> int | None:
        """SIGKILL by PID (a crash: nothing gets flushed or closed by the broker)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT)
        return self.proc.returncode

    def restart(self, extra_overrides: dict[str, object] | None = None, *, kill: bool = False):
        """Stop (or kill) if running, then start again on the same port and data directory."""
        if self.running and kill:
            self.kill()
        elif self.running:
            self.stop()
        overrides = dict(self.overrides)
        overrides.update({k: str(v) for k, v in (extra_overrides or {}).items()})
        return self.start(overrides)

    # ------------------------------------------------------------------ logs

    def _append_log(self, text: str) -> None:
        with open(self.log_path, "a") as log:
            log.write(text)

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_text(self, since: int = 0, limit: int = 20_000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                data = f.read()
        except FileNotFoundError:
            return ""
        text = data.decode(errors="replace")
        if len(text) > limit:
            text = f"[... {len(text) - limit} chars cut ...]\n" + text[-limit:]
        return text

    def log_tail(self, limit: int = 6_000) -> str:
        return f"--- {self.log_path} (tail) ---\n{self.log_text(limit=limit)}"

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"<BrokerProcess {self.name} {self.bootstrap} {state} data={self.data_dir}>"


@atexit.register
def _kill_leftovers() -> None:
    for broker in ALL_BROKERS:
        if broker.running:
            broker.kill()
