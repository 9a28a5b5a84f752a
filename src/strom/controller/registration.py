"""A controller registers itself with the active controller (KIP-919), as Kafka's do.

Every node with the controller role, voter or observer, sends ControllerRegistration (its
CONTROLLER listeners and the feature levels its software supports, under a new incarnation id
per process) until the metadata log holds its registration of this incarnation; the active
controller writes it as a record. When the registration disappears from the log again
(UnregisterController, KIP-1312, sent while the node still runs) it registers again, as
Kafka's ControllerRegistrationManager does: unregistering is for controllers that are gone.

Registered controllers are what DescribeCluster answers on a CONTROLLER listener
(``kafka-cluster list-endpoints --bootstrap-controller``) and what UpdateFeatures checks a
new level against.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from strom.cluster.features import supported_ranges
from strom.cluster.records import Change
from strom.common.tasks import cancel_all
from strom.controller.loader import MetadataLoader
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger("strom.controller")

REGISTRATION_VERSION = 0
# after a refused or unanswered registration, ask again after this, doubled up to the cap
# (Kafka's ControllerRegistrationManager backs off exponentially too)
FIRST_RETRY_S = 0.1
MAX_RETRY_S = 5.0
PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}

Send = Callable[[ApiKey, int, Mapping[str, Any]], Awaitable[Any]]


class ControllerRegistrationManager:
    """Keeps this controller registered (see the module doc)."""

    def __init__(self, node_id: int, endpoints: Sequence[tuple[str, str, int]],
                 protocols: Mapping[str, str], loader: MetadataLoader, send: Send) -> None:
        self.node_id = node_id
        self.incarnation = uuid.uuid4()
        self._listeners = [{"name": name, "host": host, "port": port,
                            "security_protocol": PROTOCOL_IDS.get(protocols.get(name, ""), 0)}
                           for name, host, port in endpoints]
        self._loader = loader
        self._send = send
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        loader.subscribe(self._on_changes)

    def registered(self) -> bool:
        """Whether the metadata log holds this process's registration."""
        reg = self._loader.image.controllers.get(self.node_id)
        return reg is not None and reg.incarnation == str(self.incarnation)

    def start(self) -> None:
        self._tasks = [asyncio.get_running_loop().create_task(
            self._run(), name="controller-registration")]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._tasks = []

    def _on_changes(self, changes: list[Change]) -> None:
        if any(c.kind == "controllers_changed" for c in changes):
            self._wake.set()

    def _request(self) -> dict[str, Any]:
        return {"controller_id": self.node_id, "incarnation_id": self.incarnation,
                "zk_migration_ready": False, "listeners": self._listeners,
                "features": [{"name": name, "min_supported_version": lo,
                              "max_supported_version": hi}
                             for name, (lo, hi) in sorted(supported_ranges().items())]}

    async def _register(self) -> bool:
        """One attempt: whether the active controller took it."""
        try:
            response = await self._send(ApiKey.CONTROLLER_REGISTRATION, REGISTRATION_VERSION,
                                        self._request())
        except KafkaError as exc:
            log.info("controller %d: registration not sent: %s", self.node_id, exc.message)
            return False
        code = int(getattr(response, "error_code", 0))
        if code != ErrorCode.NONE:
            log.warning("controller %d: the active controller refused its registration: %s "
                        "(%s)", self.node_id, ErrorCode(code).name,
                        getattr(response, "error_message", None))
            return False
        return True

    async def _run(self) -> None:
        retry_s = FIRST_RETRY_S
        was_registered = False
        while True:
            self._wake.clear()
            timeout: float | None = None
            if self.registered():
                if not was_registered:
                    log.info("controller %d is registered (incarnation %s)", self.node_id,
                             self.incarnation)
                was_registered, retry_s = True, FIRST_RETRY_S
            else:
                if was_registered:
                    log.info("controller %d: its registration was removed; registering again",
                             self.node_id)
                    was_registered = False
                sent = await self._register()
                # taken: the record shows up once committed (a change wakes this); else retry
                timeout = retry_s
                retry_s = FIRST_RETRY_S if sent else min(retry_s * 2, MAX_RETRY_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
