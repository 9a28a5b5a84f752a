"""Starting and stopping a broker process: `strom broker` ends up here."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import inspect
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Mapping
from pathlib import Path

import strom
from strom.broker.core import Broker
from strom.broker.handlers import MODULES
from strom.broker.partitions import PartitionManager
from strom.broker.router import Router
from strom.broker.server import BrokerServer
from strom.cluster.controller import LocalController
from strom.cluster.image import BrokerInfo
from strom.cluster.metadata_log import MetadataLog
from strom.common.tasks import cancel_all, cancel_and_wait
from strom.config.broker import BrokerConfig
from strom.config.checks import check_startup
from strom.config.defs import ConfigError
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import precompile
from strom.storage.cleaner import CleanerConfig, LogCleaner
from strom.storage.errors import KafkaStorageError, StorageError
from strom.storage.manager import LogManager

log = logging.getLogger("strom.broker")


class StartupError(Exception):
    """The broker cannot start; the message tells the operator why."""


_SERVING = threading.Event()  # set once the broker serves: later failures are not start-up's


def _read_meta(meta: Path) -> dict[str, str]:
    """meta.properties as a dict; an unreadable one stops the start-up with one clear line (it
    holds the cluster id, which nothing else can supply)."""
    try:
        text = meta.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StartupError(f"cannot read {meta}: {e}") from e
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#"))  # fmt: skip


def setup_logging() -> None:
    level = os.environ.get("STROM_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=level,
        format="%(asctime)s level=%(levelname)s logger=%(name)s msg=%(message)s",
        stream=sys.stderr,
    )


def raise_fd_limit() -> None:
    """Partitions need files; take the hard limit so the FD budget, not the OS, decides."""
    with contextlib.suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cluster_id_for(log_dirs: list[Path], broker_id: int, expected: str | None = None) -> str:
    """Read or create meta.properties in every log dir; all must agree (as Kafka requires).
    A new log dir takes ``expected`` (a cluster's id from ZooKeeper) when given."""
    found: dict[str, str] = {}
    for d in log_dirs:
        d.mkdir(parents=True, exist_ok=True)
        meta = d / "meta.properties"
        if meta.exists():
            props = _read_meta(meta)
            node = props.get("node.id", props.get("broker.id"))
            if node is not None and not node.strip().lstrip("-").isdigit():
                raise StartupError(f"{meta} has node.id={node}, which is not a number")
            if node is not None and int(node) != broker_id:
                raise StartupError(
                    f"{meta} belongs to broker {node}, but this broker is broker.id={broker_id}")
            if "cluster.id" in props:
                found[str(d)] = props["cluster.id"]
    ids = set(found.values())
    if len(ids) > 1:
        raise StartupError(f"log dirs belong to different clusters: {found}")
    cluster_id = ids.pop() if ids else (
        expected or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22])
    for d in log_dirs:
        meta = d / "meta.properties"
        if not meta.exists():
            meta.write_text(f"#Written by Strom {strom.__version__}\nversion=1\n"
                            f"cluster.id={cluster_id}\nnode.id={broker_id}\n")
    return cluster_id


def cleaner_config(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enabled=config.get("log.cleaner.enable"),
        threads=config.get("log.cleaner.threads"),
        dedupe_buffer_size=config.get("log.cleaner.dedupe.buffer.size"),
        io_buffer_load_factor=config.get("log.cleaner.io.buffer.load.factor"),
        backoff_ms=config.get("log.cleaner.backoff.ms"),
    )


def build_broker(config: BrokerConfig) -> tuple[Broker, list[BrokerServer]]:
    broker_id = config.broker_id
    log_dirs = config.log_dirs
    cluster_id = cluster_id_for(log_dirs, broker_id)
    logs = LogManager(log_dirs, max_open_files=config.get("max.open.files"),
                      producer_id_expiration_ms=config.get("producer.id.expiration.ms"))
    started = time.monotonic()
    logs.load()
    metadata_log = MetadataLog(logs)
    image = metadata_log.load(cluster_id)
    advertised = config.advertised_listeners()
    _, adv_host, adv_port = advertised[0]
    info = BrokerInfo(broker_id, adv_host or socket.gethostname(), adv_port,
                      config.get("broker.rack"))
    controller = LocalController(metadata_log, image, info)
    partitions = PartitionManager(broker_id, config, image, logs)
    partitions.refresh_dynamic_broker_configs()
    partitions.sync_all()
    controller.subscribe(partitions.on_changes)
    broker = Broker(config, broker_id, cluster_id, info, image, controller, partitions, logs)
    servers = make_servers(broker)
    log.info("loaded %d partition logs and %d topics in %.2fs", sum(1 for _ in logs.logs()),
             len(image.topics), time.monotonic() - started)
    return broker, servers


def make_servers(broker: Broker) -> list[BrokerServer]:
    config = broker.config
    broker.router = Router(broker, MODULES)
    return [
        BrokerServer(broker.router, host or "0.0.0.0", port,
                     max_request_bytes=config.get("socket.request.max.bytes"),
                     send_buffer=config.get("socket.send.buffer.bytes"),
                     receive_buffer=config.get("socket.receive.buffer.bytes"),
                     backlog=config.get("socket.listen.backlog.size"),
                     max_idle_ms=config.get("connections.max.idle.ms"))
        for _, host, port in config.listeners()
    ]


async def _periodic(interval_ms: int, fn, name: str) -> None:
    """Call ``fn`` every interval (awaiting it when it returns an awaitable: disk work that
    runs in worker threads, so the next round starts after this one's fsyncs)."""
    interval = max(interval_ms, 10) / 1000
    while True:
        await asyncio.sleep(interval)
        try:
            result = fn()
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("background task %s failed", name)


# APIs that nearly every client sends in its first seconds. Their codecs are built before the
# broker listens: a codec's first use imports kio's schema modules, ~10 ms an API, which would
# otherwise land on the first requests.
_HOT_APIS = (
    ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS,
    ApiKey.CREATE_TOPICS, ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID,
    ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT, ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_CLUSTER,
)  # fmt: skip


_SHUTDOWN_STEP_TIMEOUT_S = 5.0
_EXIT_GRACE_S = 5.0


def _exit_watchdog(grace_s: float) -> None:
    """Make sure the process ends once the logs are closed.

    After `serve` returns, asyncio joins its executor threads and the interpreter joins every
    non-daemon thread, without a time limit; a thread stuck in a library call (seen in CI: a
    broker that had logged "shut down cleanly" never exited) would hold the process forever.
    The data is durable by now, so after a grace period this logs the stacks of the threads
    still alive (to find the culprit) and exits with the status the shutdown earned.
    """

    def watch() -> None:
        time.sleep(grace_s)  # a deadline, not synchronisation: normally we never wake up
        me = threading.get_ident()
        frames = sys._current_frames()
        stuck = [t for t in threading.enumerate() if t.ident != me and t.ident in frames]
        stacks = "; ".join(
            f"{t.name}: " + " <- ".join(f"{fs.name}:{fs.lineno}"
                                         for fs in reversed(traceback.extract_stack(frames[t.ident])[-6:]))
            for t in stuck)
        log.warning("process still running %.0f s after shutdown; exiting. Threads: %s",
                    grace_s, stacks)
        logging.shutdown()
        os._exit(0)

    threading.Thread(target=watch, name="exit-watchdog", daemon=True).start()


def _stacks(tasks) -> str:
    out = []
    for task in tasks:
        frames = task.get_stack(limit=8)
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        out.append(f"{task.get_name()} ({task.get_coro().__qualname__}): {where}")
    return "; ".join(out)


async def _stop_leftover_tasks() -> None:
    """Cancel what the shutdown steps did not stop, before asyncio's own clean-up does.

    asyncio.run cancels leftover tasks once and waits for them without a limit, so one task
    that loses its cancellation keeps the process alive (seen in CI). Here they are cancelled
    again until done, and a task that needed more than one try is named in the log."""
    me = asyncio.current_task()
    leftovers = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if not leftovers:
        return
    for task in leftovers:
        task.cancel()
    _, stubborn = await asyncio.wait(leftovers, timeout=1.0)
    if stubborn:
        log.warning("shutdown: %d task(s) ignored a cancellation: %s", len(stubborn),
                    _stacks(stubborn))
    await _step("leftover tasks", cancel_all(leftovers))


async def _step(name: str, awaitable) -> None:
    """One bounded shutdown step: a step that hangs is logged with the stacks of the tasks
    still running and skipped, so the logs are still flushed and closed after it."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=_SHUTDOWN_STEP_TIMEOUT_S)
    if not done:
        log.warning("shutdown: %s did not stop within %.0f s; going on. Tasks: %s",
                    name, _SHUTDOWN_STEP_TIMEOUT_S, _stacks(asyncio.all_tasks()))
        task.cancel()
        return
    if not task.cancelled() and task.exception() is not None:
        log.warning("shutdown: %s failed: %r", name, task.exception())


async def serve(config: BrokerConfig) -> None:
    precompile(_HOT_APIS, latest_only=True)
    cluster = None
    if config.get("zookeeper.connect"):
        from strom.broker.zk_mode import build_cluster_broker

        broker, cluster = await build_cluster_broker(config)
        servers = make_servers(broker)
    else:
        broker, servers = build_broker(config)
    # -- group coordinator: serves the __consumer_offsets partitions this broker leads --
    from strom.broker.handlers.groups import build_group_coordinator

    broker.groups = build_group_coordinator(broker, asyncio.get_running_loop())
    broker.groups.start()
    # -- end group coordinator --
    # -- transaction coordinator: serves the __transaction_state partitions this broker leads --
    from strom.broker.handlers.transactions import build_transaction_coordinator

    broker.transaction_coordinator = build_transaction_coordinator(
        broker, asyncio.get_running_loop())
    broker.transaction_coordinator.start()
    # -- end transaction coordinator --
    for server in servers:
        try:
            await server.start()
        except OSError as e:
            raise StartupError(f"cannot listen on {server.host}:{server.port}: "
                               f"{(e.strerror or str(e)).lower()}") from e  # fmt: skip
    if broker.info.port == 0 and servers:  # port 0: advertise the port the OS chose
        broker.info.port = servers[0].port
    if cluster is not None:  # others may fetch from us now: register, then take part
        from strom.broker.replicas import run_replication

        await cluster.controller.register()
        cluster.controller.start()
        replication_task = asyncio.create_task(run_replication(broker))
        broker._prefetch_block()
    listener = ", ".join(f"PLAINTEXT://{s.host}:{s.port}" for s in servers)
    dirs = ", ".join(str(d) for d in config.log_dirs)
    print(f"Strom {strom.__version__} broker {broker.broker_id} listening on {listener} "
          f"(advertised {broker.info.host}:{broker.info.port}), data in {dirs}, "
          f"cluster id {broker.cluster_id}", flush=True)
    _SERVING.set()
    logs = broker.logs
    tasks = [
        asyncio.create_task(_periodic(config.get("log.retention.check.interval.ms"),
                                      lambda: logs.run_retention(broker.now_ms()), "retention")),
        asyncio.create_task(_periodic(min(config.get("log.flush.scheduler.interval.ms"), 1000),
                                      lambda: logs.flush_in_background(broker.now_ms()),
                                      "flush")),
        asyncio.create_task(_periodic(config.get("log.flush.offset.checkpoint.interval.ms"),
                                      logs.checkpoint_in_background, "checkpoint")),
        asyncio.create_task(_periodic(
            config.get("producer.id.expiration.check.interval.ms"),
            lambda: logs.remove_expired_producers(broker.now_ms()), "producer-expiry")),
    ]
    cleaner = LogCleaner(logs.logs, cleaner_config(config),
                         dir_of=lambda plog: logs.dir_of(plog.topic, plog.partition) or plog.dir.parent)
    cleaner.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    if cluster is not None and config.get("controlled.shutdown.enable"):
        moved = await cluster.controller.controlled_shutdown(
            config.get("zookeeper.session.timeout.ms") / 1000)
        log.info("controlled shutdown: %s", "leadership moved" if moved else "timed out")
    for task in tasks:
        task.cancel()
    await _step("log cleaner", cleaner.stop())
    for server in servers:
        await _step("listener", server.stop())
    broker.groups.shutdown()
    broker.transaction_coordinator.shutdown()
    if cluster is not None:
        await _step("replication", cancel_and_wait(replication_task))
        await _step("controller", cluster.controller.stop())
        await _step("metadata mirror", cluster.mirror.stop())
        await _step("ZooKeeper client", cluster.zk.stop())
    await _stop_leftover_tasks()
    try:
        logs.shutdown()
    except KafkaStorageError as e:  # no clean-shutdown marker: the next start recovers the logs
        log.error("logs not closed cleanly (%s); they will be recovered on the next start", e)
        return
    finally:
        _exit_watchdog(_EXIT_GRACE_S)
    log.info("shut down cleanly")


def run_broker(config_path: Path | None, overrides: Mapping[str, str]) -> int:
    setup_logging()
    raise_fd_limit()
    try:
        config = BrokerConfig.load(config_path, overrides)
        check_startup(config)
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
            runner = asyncio.run
        runner(serve(config))
        return 0
    except (ConfigError, StartupError, OSError, StorageError) as exc:
        print(f"strom broker: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if _SERVING.is_set():
            raise
        log.debug("start-up failed", exc_info=True)  # STROM_LOG_LEVEL=DEBUG shows where
        print(f"strom broker: cannot start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
