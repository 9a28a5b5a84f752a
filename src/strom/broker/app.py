"""Starting and stopping a broker process: `strom broker` ends up here."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import logging
import os
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import strom
from strom.broker.connection_limits import ConnectionLimits, MemoryPool, parse_ip_overrides
from strom.broker.core import Broker
from strom.broker.handlers import MODULES
from strom.broker.handlers import quorum as quorum_handlers
from strom.broker.metrics.collector import start_metrics
from strom.broker.metrics.request_hook import RequestMetrics
from strom.broker.quotas.request_hook import RequestQuota
from strom.broker.replicas import run_replication
from strom.broker.router import RequestHook, Router
from strom.broker.server import BrokerServer
from strom.broker.wiring import StartupError, build_local_node, wire_broker
from strom.common import stall_watch
from strom.common.tasks import cancel_all, cancel_and_wait
from strom.config.broker import BrokerConfig
from strom.config.checks import check_startup
from strom.config.defs import ConfigError, ConfigSource
from strom.config.listeners import default_listener, listeners
from strom.config.metrics import metrics_endpoint
from strom.config.ports import bind_own_port
from strom.metrics.exposition import MetricsServer
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import precompile, request_codec, response_codec, supported_versions
from strom.security.listeners import ListenerSecurity, build_listener_security
from strom.security.scram_store import UserConfigs, lookup_in
from strom.storage.cleaner import CleanerConfig, LogCleaner
from strom.storage.errors import KafkaStorageError, StorageError

if TYPE_CHECKING:
    from strom.broker.kraft_mode import KRaftParts
    from strom.broker.zk_mode import ClusterParts
    from strom.cluster.image import MetadataImage
    from strom.controller.node import ControllerNode

log = logging.getLogger("strom.broker")


_SERVING = threading.Event()  # set once the broker serves: later failures are not start-up's


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


def cleaner_config(config: BrokerConfig) -> CleanerConfig:
    return CleanerConfig(
        enabled=config.get("log.cleaner.enable"),
        threads=config.get("log.cleaner.threads"),
        dedupe_buffer_size=config.get("log.cleaner.dedupe.buffer.size"),
        io_buffer_load_factor=config.get("log.cleaner.io.buffer.load.factor"),
        backoff_ms=config.get("log.cleaner.backoff.ms"),
    )


def build_broker(config: BrokerConfig, loop: asyncio.AbstractEventLoop) -> Broker:
    """A single-node broker, complete with its coordinators (not yet started)."""
    return wire_broker(build_local_node(config), loop)


def listener_securities(config: BrokerConfig,
                        user_configs: Callable[[], UserConfigs]) -> list[ListenerSecurity]:
    """Each listener's TLS and SASL, in the order of `listeners`: built before the logs are
    touched, so a bad key store or JAAS config stops the start-up with one line. SCRAM
    credentials are read from ``user_configs`` (the metadata image's) at each authentication."""
    credentials = lookup_in(user_configs)
    return [build_listener_security(config, listener, credentials)
            for listener in listeners(config)]


def request_hooks(broker: Broker) -> list[RequestHook]:
    """What runs around every request (docs/architecture.md, "Request hooks"): the request
    quota, always (quotas may be set at any time; it measures nothing while none is), and
    Kafka's request metrics when metrics are on."""
    hooks: list[RequestHook] = [RequestQuota(broker.quotas)]
    if broker.stats is not None:
        hooks.append(RequestMetrics(broker.stats))
    return hooks


def make_servers(router: Router, config: BrokerConfig,
                 securities: list[ListenerSecurity]) -> list[BrokerServer]:
    # one set of limits for every listener: max.connections and the memory pool are broker-wide
    limits = ConnectionLimits(
        max_connections=config.get("max.connections"),
        max_per_ip=config.get("max.connections.per.ip"),
        per_ip_overrides=parse_ip_overrides(config.get("max.connections.per.ip.overrides")),
        max_waiting=config.get("socket.listen.backlog.size"))
    memory = MemoryPool(config.get("queued.max.request.bytes"))
    return [
        BrokerServer(router, security.listener.host or "0.0.0.0", security.listener.port,
                     max_request_bytes=config.get("socket.request.max.bytes"),
                     send_buffer=config.get("socket.send.buffer.bytes"),
                     receive_buffer=config.get("socket.receive.buffer.bytes"),
                     backlog=config.get("socket.listen.backlog.size"),
                     max_idle_ms=config.get("connections.max.idle.ms"),
                     limits=limits, memory=memory, security=security,
                     stats=router.broker.stats)
        for security in securities
    ]


async def _start_servers(servers: list[BrokerServer]) -> None:
    """Listen on every listener; a port that cannot be had stops the start with one line."""
    for server in servers:
        try:
            await server.start()
        except OSError as e:
            raise StartupError(f"cannot listen on {server.host}:{server.port}: "
                               f"{(e.strerror or str(e)).lower()}") from e  # fmt: skip


def _advertise_chosen_ports(broker: Broker, config: BrokerConfig,
                            servers: list[BrokerServer]) -> None:
    """A listener on port 0 is advertised with the port the OS chose (tests use this)."""
    info = broker.info
    default = default_listener(config).name
    for server in servers:
        name = server.security.listener.name
        host, port = info.endpoints.get(name, (info.host, info.port))
        if port == 0:
            info.endpoints[name] = (host, server.port)
        if name == default and info.port == 0:
            info.port = server.port


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


def _import_in_background(broker: Broker, servers: list[BrokerServer]) -> None:
    """What a feature this broker has on imports at its first use, imported on a thread now:
    scramp for a SASL listener, aiokafka's batch reader with a schema registry (validated
    topics). Left out of the start (about 120 ms of CPU together), and imported later on the
    event loop they would stall every client for tens of ms."""
    jobs: list[Callable[[], object]] = []
    if any(server.security.listener.sasl for server in servers):
        jobs.append(lambda: importlib.import_module("scramp"))
    if broker.registry is not None:
        from strom.broker.schema_check import load_parser

        jobs.append(load_parser)
    if jobs:
        threading.Thread(target=lambda: [job() for job in jobs], name="warm-imports",
                         daemon=True).start()


def _precompile_inter_broker_codecs() -> None:
    """Build, on a thread, the codecs a broker of a cluster sends other nodes and answers them
    at (the versions its senders use, not the latest), once it serves: the first failover
    would otherwise compile them on the event loop (tens of ms, with imports). The loop keeps
    serving meanwhile (the GIL passes every few ms) and finds them built when it needs them."""
    from strom.broker.alter_partition import VERSION as ALTER_PARTITION_VERSION
    from strom.broker.kraft_cluster import HEARTBEAT_VERSION, REGISTRATION_VERSION
    from strom.broker.markers import WRITE_TXN_MARKERS_VERSION
    from strom.cluster.replication.fetcher import FETCH_VERSION, LIST_OFFSETS_VERSION
    from strom.controller.registration import REGISTRATION_VERSION as CONTROLLER_REGISTRATION

    # Produce in the versions clients negotiate, not only the latest the broker prebuilds
    # (librdkafka 2.16 sends v10): its first use imported kio's modules on the loop during a
    # failover (20-40 ms, seen with the stall watchdog)
    lo, hi = supported_versions(ApiKey.PRODUCE)
    produce = tuple((ApiKey.PRODUCE, v) for v in range(max(lo, 7), hi))
    codecs: tuple[tuple[ApiKey, int | None], ...] = (  # None: the latest version
        (ApiKey.FETCH, FETCH_VERSION), (ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION),
        (ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION),
        (ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION),
        (ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION), (ApiKey.ALLOCATE_PRODUCER_IDS, 0),
        (ApiKey.ENVELOPE, 0), (ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION),
        (ApiKey.ELECT_LEADERS, None), (ApiKey.CREATE_TOPICS, None),
        # the admin requests that move or remove many partitions at once: their first use on a
        # long-running broker would add a codec's build (with imports) to that stall
        (ApiKey.DELETE_TOPICS, None), (ApiKey.CREATE_PARTITIONS, None),
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, None),
        (ApiKey.CONTROLLER_REGISTRATION, CONTROLLER_REGISTRATION), *produce)

    def build() -> None:
        for api_key, version in codecs:
            chosen = supported_versions(api_key)[1] if version is None else version
            request_codec(api_key, chosen)
            response_codec(api_key, chosen)

    threading.Thread(target=build, name="codec-precompile", daemon=True).start()


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
        stuck = [(t.name, frames[t.ident]) for t in threading.enumerate()
                 if t.ident is not None and t.ident != me and t.ident in frames]
        stacks = "; ".join(
            f"{name}: " + " <- ".join(f"{fs.name}:{fs.lineno}"
                                      for fs in reversed(traceback.extract_stack(frame)[-6:]))
            for name, frame in stuck)
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


def _start_metrics(broker: Broker, config: BrokerConfig,
                   servers: list[BrokerServer]) -> MetricsServer | None:
    endpoint = metrics_endpoint(config.get("metrics.listener"))
    if endpoint is None:
        return None
    host, port = endpoint
    explicit = config.source_of("metrics.listener")[1] is not ConfigSource.DEFAULT_CONFIG
    return bind_own_port(lambda: start_metrics(broker, servers, host, port), service="metrics",
                         config="metrics.listener", host=host, port=port, explicit=explicit,
                         hint=", or an empty value to turn metrics off")


def controller_only(config: BrokerConfig) -> bool:
    """process.roles=controller: a KRaft controller node (`serve_controller`)."""
    roles = config.get("process.roles") or []
    return "controller" in roles and "broker" not in roles


async def serve_controller(config: BrokerConfig) -> None:
    """A controller-only KRaft node: its Raft voter and its CONTROLLER listener (which only
    ever serves the controller's APIs), until SIGTERM/SIGINT; a stopping leader hands over.
    While it leads the quorum it is the active controller the brokers register with."""
    from strom.broker.kraft_mode import build_controller_only  # only KRaft controllers load it

    if metrics_endpoint(config.get("metrics.listener")) is not None \
            and config.source_of("metrics.listener")[1] is not ConfigSource.DEFAULT_CONFIG:
        log.warning("metrics.listener is set, but a controller-only node serves no metrics yet")
    serving: list[ControllerNode] = []

    def user_configs() -> UserConfigs:
        """SCRAM credentials from the node's metadata image, as a broker reads them."""
        image = serving[0].image if serving else None
        return image.user_configs if image is not None else {}

    securities = listener_securities(config, user_configs)
    servers: list[BrokerServer] = []

    async def serve_listener(node: ControllerNode, names: set[str]) -> None:
        serving.append(node)
        servers.extend(make_servers(node.router(), config, securities))
        await _start_servers(servers)

    try:
        parts = await build_controller_only(config, serve_listener)
    except BaseException:
        for server in servers:
            await _step("listener", server.stop())
        raise
    node = parts.controller_node
    listener = ", ".join(f"{s.security.listener.name}://{s.host}:{s.port}" for s in servers)
    print(f"Strom {strom.__version__} {node.describe()}, listening on {listener}", flush=True)
    _SERVING.set()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    failed = asyncio.ensure_future(node.failed.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({failed, stopping}, return_when=asyncio.FIRST_COMPLETED)
    failed.cancel()
    stopping.cancel()
    log.info("shutting down")
    await _step("controller", parts.controller.stop())
    await _step("raft", node.stop())  # the listener still answers while leadership moves
    for server in servers:
        await _step("listener", server.stop())
    await _stop_leftover_tasks()
    parts.broker.logs.shutdown()
    _exit_watchdog(_EXIT_GRACE_S)
    if node.fatal is not None:
        raise node.fatal
    log.info("shut down cleanly")


async def serve(config: BrokerConfig) -> None:
    stall_watch.start_from_env(asyncio.get_running_loop())
    if controller_only(config):
        await serve_controller(config)
        return
    roles = config.get("process.roles")
    precompile(_HOT_APIS, latest_only=True)
    images: list[Callable[[], MetadataImage | None]] = []  # the broker's, once built

    def user_configs() -> UserConfigs:
        """SCRAM credentials from the metadata image: the controller node's while the broker
        is being built (its CONTROLLER listener serves first), then the broker's."""
        image = images[-1]() if images else None
        return image.user_configs if image is not None else {}

    securities = listener_securities(config, user_configs)
    cluster: ClusterParts | None = None
    kraft: KRaftParts | None = None
    controller_servers: list[BrokerServer] = []  # a controller's CONTROLLER listener(s)
    if roles:
        from strom.broker.kraft_mode import build_kraft_broker

        async def serve_controller_listener(node: ControllerNode, names: set[str]) -> None:
            """The CONTROLLER listener serves before the broker is built: the other voters
            need this one's vote to elect the leader the broker waits for."""
            images.append(lambda: node.image)
            controller_servers.extend(make_servers(
                node.router(), config, [s for s in securities if s.listener.name in names]))
            await _start_servers(controller_servers)

        try:
            broker, kraft = await build_kraft_broker(config, serve_controller_listener)
        except BaseException:
            for server in controller_servers:
                await _step("listener", server.stop())
            raise
    elif config.get("zookeeper.connect"):
        from strom.broker.zk_mode import build_cluster_broker  # kazoo: only for a cluster

        broker, cluster = await build_cluster_broker(config)
    else:
        broker = build_broker(config, asyncio.get_running_loop())
    images.append(lambda: broker.image)
    broker.start()
    kraft_cluster = kraft.cluster if kraft is not None else None
    if cluster is not None or kraft_cluster is not None:
        _precompile_inter_broker_codecs()
    router = Router(broker, MODULES if kraft is None else [*MODULES, quorum_handlers],
                    request_hooks(broker),
                    forwarder=kraft_cluster.forwarder if kraft_cluster is not None else None)
    if kraft_cluster is not None:  # admin requests other brokers forward to this one
        kraft_cluster.forwarder.dispatch = router.dispatch
        kraft_cluster.forwarder.response_header = router.response_header
    if kraft is not None:  # the CONTROLLER listener serves the controller's APIs
        names = kraft.controller_listener_names
        servers = make_servers(router, config,
                               [s for s in securities if s.listener.name not in names])
    else:
        servers = make_servers(router, config, securities)
    await _start_servers(servers)
    if kraft is not None:
        servers += controller_servers
    _advertise_chosen_ports(broker, config, servers)
    metrics = _start_metrics(broker, config, servers)
    _import_in_background(broker, servers)
    registry = None
    if broker.registry is not None:  # uvicorn and the registry's modules: only when it is on
        from strom.broker.registry_listener import start_registry_listener

        registry = start_registry_listener(broker, securities)
    rest = None
    if config.get("rest.listeners"):  # a process of its own, a client of this broker
        from strom.broker.rest_listener import start_rest_listener

        rest = start_rest_listener(broker, [s for s in servers if kraft is None or
                                            s.security.listener.name not in
                                            kraft.controller_listener_names])
    lake = None
    if config.get("iceberg.enable"):  # the lake writer: a process of its own, a client too
        from strom.broker.lake_listener import start_lake_listener

        started = start_lake_listener(broker, [s for s in servers if kraft is None or
                                               s.security.listener.name not in
                                               kraft.controller_listener_names])
        if started is not None:
            lake, status = started
            if metrics is not None:
                from strom.broker.lake_listener import LakeCollector

                metrics.registry.register(LakeCollector(status))
    if cluster is not None and broker.replicas is not None:  # others may fetch from us now:
        await cluster.controller.register()  # register, then take part
        cluster.controller.start()
        replication_task = asyncio.create_task(run_replication(broker.replicas, broker))
        broker.producer_ids.prefetch()
    if kraft_cluster is not None and broker.replicas is not None:  # register, then take part
        if kraft_cluster.controller is not None:
            kraft_cluster.controller.start()
        kraft_cluster.lifecycle.start()
        if kraft_cluster.assignments is not None:
            kraft_cluster.assignments.start()
        replication_task = asyncio.create_task(run_replication(broker.replicas, broker))
    if kraft is not None:
        broker.producer_ids.prefetch()  # the controller answers later than the first producer
    listener = ", ".join(f"{s.security.listener.name}://{s.host}:{s.port}" for s in servers)
    dirs = ", ".join(str(d) for d in config.log_dirs)
    print(f"Strom {strom.__version__} broker {broker.broker_id} listening on {listener} "
          f"(advertised {broker.info.host}:{broker.info.port}), data in {dirs}, "
          f"cluster id {broker.cluster_id}"
          + (f", metrics at {metrics.url}" if metrics is not None else "")
          + (f", schema registry at {registry.url}" if registry is not None else "")
          + (f", HTTP API at {rest.url}" if rest is not None else ""), flush=True)
    _SERVING.set()
    logs = broker.logs
    tasks = [
        asyncio.create_task(_periodic(config.get("log.retention.check.interval.ms"),
                                      lambda: logs.run_retention_in_slices(broker.now_ms()),
                                      "retention")),
        asyncio.create_task(_periodic(min(config.get("log.flush.scheduler.interval.ms"), 1000),
                                      lambda: logs.flush_in_background(broker.now_ms()),
                                      "flush")),
        asyncio.create_task(_periodic(config.get("log.flush.offset.checkpoint.interval.ms"),
                                      logs.checkpoint_in_background, "checkpoint")),
        asyncio.create_task(_periodic(
            config.get("producer.id.expiration.check.interval.ms"),
            lambda: logs.remove_expired_producers_in_slices(broker.now_ms()),
            "producer-expiry")),
    ]
    cleaner = LogCleaner(logs.logs, cleaner_config(config),
                         dir_of=lambda plog: logs.dir_of(plog.topic, plog.partition) or plog.dir.parent,
                         settings=lambda: cleaner_config(config))  # dynamic broker configs
    cleaner.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    gave_up: str | None = None
    if kraft_cluster is not None and broker.replicas is not None:
        lifecycle = kraft_cluster.lifecycle
        await _first_of(stop.wait(), lifecycle.gave_up.wait())
        gave_up = lifecycle.gave_up_reason if lifecycle.gave_up.is_set() else None
    else:
        await stop.wait()
    log.info("shutting down")
    if cluster is not None and config.get("controlled.shutdown.enable"):
        moved = await cluster.controller.controlled_shutdown(
            config.get("zookeeper.session.timeout.ms") / 1000)
        log.info("controlled shutdown: %s", "leadership moved" if moved else "timed out")
    if kraft_cluster is not None and config.get("controlled.shutdown.enable"):
        moved = await kraft_cluster.lifecycle.controlled_shutdown(
            config.get("broker.session.timeout.ms") / 1000)
        log.info("controlled shutdown: %s", "leadership moved" if moved else "timed out")
    if rest is not None:  # first: its in-flight requests still reach the listeners
        await _step("HTTP API", rest.stop())
    if lake is not None:  # it commits what it read, then exits
        await _step("lake writer", lake.stop())
    for task in tasks:
        task.cancel()
    await _step("log cleaner", cleaner.stop())
    for server in servers:
        if server not in controller_servers:  # those answer until the raft node has stopped
            await _step("listener", server.stop())
    if metrics is not None:
        await _step("metrics endpoint", asyncio.to_thread(metrics.stop))
    if registry is not None:
        await _step("schema registry", registry.stop())
    broker.stop()
    if cluster is not None:
        await _step("replication", cancel_and_wait(replication_task))
        await _step("controller", cluster.controller.stop())
        await _step("metadata mirror", cluster.mirror.stop())
        await _step("ZooKeeper client", cluster.zk.stop())
    if kraft_cluster is not None:
        if broker.replicas is not None:
            await _step("replication", cancel_and_wait(replication_task))
        if kraft_cluster.assignments is not None:
            await _step("directory assignments", kraft_cluster.assignments.stop())
        await _step("broker lifecycle", kraft_cluster.lifecycle.stop())
        kraft_cluster.forwarder.channel.close()  # the controller channel AlterPartition uses too
        if kraft_cluster.controller is not None:
            await _step("controller", kraft_cluster.controller.stop())
    if kraft is not None:
        # a leader that resigns hears of its successor (Vote, BeginQuorumEpoch) on its
        # CONTROLLER listener: closed earlier, it would wait out the whole shutdown timeout
        await _step("raft", kraft.controller_node.stop())
        for server in controller_servers:
            await _step("listener", server.stop())
    await _stop_leftover_tasks()
    try:
        logs.shutdown()
    except KafkaStorageError as e:  # no clean-shutdown marker: the next start recovers the logs
        log.error("logs not closed cleanly (%s); they will be recovered on the next start", e)
        return
    finally:
        _exit_watchdog(_EXIT_GRACE_S)
    if gave_up is not None:
        raise StartupError(gave_up)
    log.info("shut down cleanly")


async def _first_of(*waits: Coroutine[Any, Any, Any]) -> None:
    """Return once any of `waits` is done (the others are cancelled)."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


# How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms).
# Worker threads run Python too (a large creation's metadata commit, the snapshot's encoding,
# the log cleaner): at 5 ms each time the event loop wanted the GIL back it waited up to 5 ms,
# again and again, and a client's request stalled 64-100 ms while 10,000 partitions were
# created; at 0.5 ms, 10-18 ms (measured, docs/benchmarks.md). The hot paths barely notice:
# their worker threads wait in system calls, which release the GIL.
GIL_SWITCH_INTERVAL_S = 0.0005


def run_broker(config_path: Path | None, overrides: Mapping[str, str]) -> int:
    setup_logging()
    raise_fd_limit()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    try:
        config = BrokerConfig.load(config_path, overrides)
        check_startup(config)
        runner: Callable[[Coroutine[Any, Any, None]], None]
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
