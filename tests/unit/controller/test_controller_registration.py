"""Controller registrations (KIP-919) and their removal (UnregisterController, KIP-1312).

- A ControllerRegistration becomes a record in the metadata image; the same registration sent
  again (a lost answer) writes nothing; DescribeCluster on a CONTROLLER listener lists the
  registered controllers at the listener asked on.
- UnregisterController answers as Kafka 4.4's controller: the active controller's own id is
  INVALID_REQUEST, an id nobody registered CONTROLLER_ID_NOT_REGISTERED, a metadata.version
  before 4.4-IV2 (33) UNSUPPORTED_VERSION, a controller that does not lead NOT_CONTROLLER, and
  none of them changes anything.
- The registration manager registers once, and again when its registration is removed while
  it still runs.
- UpdateFeatures refuses a level a registered controller (or broker) does not support, with
  Kafka's words, and takes it once that controller is unregistered; a broker that does not
  support a finalized level cannot register (UNSUPPORTED_VERSION).
- A snapshot's records (`image_records`) keep the registrations.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from strom.broker.handlers.features import answer_update_features
from strom.cluster import records as rec
from strom.cluster.image import ControllerRegistration, MetadataImage
from strom.controller import apis, broker_apis
from strom.controller.registration import ControllerRegistrationManager
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

from .test_broker_apis import Ctx, Node, decoded, registration, run


def controller_registration(controller_id: int, *, port: int = 9093,
                            features: dict[str, tuple[int, int]] | None = None) -> Any:
    ranges = features if features is not None else {"metadata.version": (7, 33)}
    return decoded(ApiKey.CONTROLLER_REGISTRATION, 0, {
        "controller_id": controller_id, "incarnation_id": uuid.uuid4(),
        "zk_migration_ready": False,
        "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": port,
                       "security_protocol": 0}],
        "features": [{"name": n, "min_supported_version": lo, "max_supported_version": hi}
                     for n, (lo, hi) in ranges.items()]})


def unregister(controller_id: int) -> Any:
    return decoded(ApiKey.UNREGISTER_CONTROLLER, 0, {"controller_id": controller_id})


class ControllerCtx:
    api_version = 2
    listener = "CONTROLLER"


class QuorumNode(Node):
    """The node as the CONTROLLER listener's DescribeCluster sees it."""

    def leader_id(self) -> int:
        return 1

    def controller_endpoints(self) -> dict[int, tuple[str, int]]:
        return {1: ("127.0.0.1", 9093)}  # the voters: 1 only

    @property
    def image(self) -> MetadataImage:
        return self.loader.image


def test_registrations_are_records_and_describe_cluster_lists_them() -> None:
    async def main() -> None:
        node = QuorumNode()
        first = controller_registration(2, port=9094)
        assert (await broker_apis.controller_registration(node, Ctx(), first))["error_code"] \
            == ErrorCode.NONE
        reg = node.loader.image.controllers[2]
        assert reg.endpoints == {"CONTROLLER": ("127.0.0.1", 9094)}
        assert reg.features == {"metadata.version": (7, 33)}
        appended = len(node.quorum.appended)
        await broker_apis.controller_registration(node, Ctx(), first)  # the answer was lost
        assert len(node.quorum.appended) == appended

        def described() -> tuple[list[tuple[int, int]], int]:
            answer = apis.describe_cluster(node, ControllerCtx(), decoded(
                ApiKey.DESCRIBE_CLUSTER, 2, {"include_cluster_authorized_operations": False,
                                             "endpoint_type": apis.CONTROLLER_ENDPOINT,
                                             "include_fenced_brokers": False}))
            return ([(b["broker_id"], b["port"]) for b in answer["brokers"]],
                    answer["controller_id"])

        # the registered controllers only, as Kafka's: the active one (1) has not registered
        assert described() == ([(2, 9094)], -1)
        await broker_apis.controller_registration(node, Ctx(), controller_registration(1))
        assert described() == ([(1, 9093), (2, 9094)], 1)
        # none registered (a quorum starting, a single node): the voters
        node.loader.image.controllers.clear()
        assert described() == ([(1, 9093)], 1)

    run(main)


def test_unregister_controller_answers_as_kafkas_controller() -> None:
    async def main() -> None:
        node = Node()
        await broker_apis.controller_registration(node, Ctx(), controller_registration(1))
        await broker_apis.controller_registration(node, Ctx(), controller_registration(3))
        before = list(node.quorum.appended)
        itself = await broker_apis.unregister_controller(node, Ctx(), unregister(1))
        assert itself["error_code"] == ErrorCode.INVALID_REQUEST
        assert "cannot unregister itself" in itself["error_message"]
        nobody = await broker_apis.unregister_controller(node, Ctx(), unregister(7))
        assert nobody["error_code"] == ErrorCode.CONTROLLER_ID_NOT_REGISTERED
        node.loader.image.finalized_features["metadata.version"] = 32  # before 4.4-IV2
        old_mv = await broker_apis.unregister_controller(node, Ctx(), unregister(3))
        assert old_mv["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        del node.loader.image.finalized_features["metadata.version"]
        node.leading = False
        elsewhere = await broker_apis.unregister_controller(node, Ctx(), unregister(3))
        assert elsewhere["error_code"] == ErrorCode.NOT_CONTROLLER
        assert node.quorum.appended == before

        node.leading = True
        done = await broker_apis.unregister_controller(node, Ctx(), unregister(3))
        assert done["error_code"] == ErrorCode.NONE
        assert set(node.loader.image.controllers) == {1}

    run(main)


def test_a_running_controller_registers_again_once_unregistered() -> None:
    async def main() -> None:
        node = Node()
        sent: list[int] = []

        async def send(api_key: ApiKey, version: int, body: dict[str, Any]) -> Any:
            sent.append(api_key)
            answer = await broker_apis.controller_registration(
                node, Ctx(), decoded(api_key, version, body))
            if answer["error_code"] != ErrorCode.NONE:
                raise KafkaError(ErrorCode(answer["error_code"]), "refused")
            return SimpleNamespace(**answer)

        manager = ControllerRegistrationManager(
            3, [("CONTROLLER", "127.0.0.1", 9095)], {"CONTROLLER": "PLAINTEXT"}, node.loader,
            send)
        manager.start()
        loader = node.loader
        assert await loader.wait_for(manager.registered, 5)
        reg = loader.image.controllers[3]
        assert reg.incarnation == str(manager.incarnation)
        assert reg.endpoints == {"CONTROLLER": ("127.0.0.1", 9095)}
        assert reg.features["kraft.version"] == (0, 1)
        assert sent == [ApiKey.CONTROLLER_REGISTRATION]

        await broker_apis.unregister_controller(node, Ctx(), unregister(3))
        assert await loader.wait_for(lambda: 3 in loader.image.controllers, 5)
        assert manager.registered() and len(sent) == 2
        await manager.stop()

    run(main)


def features_request(level: int) -> Any:
    return decoded(ApiKey.UPDATE_FEATURES, 1, {
        "timeout": 60_000, "validate_only": False,
        "feature_updates": [{"feature": "share.version", "max_version_level": level,
                             "upgrade_type": 2}]})


def test_a_level_a_registered_controller_lacks_is_refused_until_it_is_unregistered() -> None:
    async def main() -> None:
        node = Node()
        controller = node.cluster
        assert controller is not None
        old = controller_registration(3, features={"share.version": (0, 1)})
        await broker_apis.controller_registration(node, Ctx(), old)
        image = node.loader.image
        refused = await answer_update_features(image, controller, features_request(2), 1, 0)
        assert refused["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
        assert refused["error_message"] == ("Invalid update version 2 for feature "
                                            "share.version. Controller 3 only supports "
                                            "versions 0-1")
        await broker_apis.unregister_controller(node, Ctx(), unregister(3))
        taken = await answer_update_features(image, controller, features_request(2), 1, 0)
        assert taken["error_code"] == ErrorCode.NONE

    run(main)


def test_a_broker_without_a_finalized_level_cannot_register() -> None:
    async def main() -> None:
        node = Node()
        body = registration(4).to_dict()
        body["features"] = [{"name": "transaction.version", "min_supported_version": 0,
                             "max_supported_version": 1}]  # 2 is finalized by default
        refused = await broker_apis.broker_registration(
            node, Ctx(), decoded(ApiKey.BROKER_REGISTRATION, 4, body))
        assert refused["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        assert node.quorum.appended == []

    run(main)


def test_a_snapshot_keeps_the_controller_registrations() -> None:
    image = MetadataImage(cluster_id="c")
    image.controllers[2] = ControllerRegistration(2, "inc", {"CONTROLLER": ("h", 1)},
                                                  {"kraft.version": (0, 1)})
    rebuilt = MetadataImage(cluster_id="c")
    for record in rec.image_records(image):
        rec.apply(rebuilt, record)
    assert rebuilt.controllers == image.controllers
    rec.apply(rebuilt, rec.unregister_controller_record(2))
    assert rebuilt.controllers == {}


def test_registrations_wake_nothing_else() -> None:
    """The change kind a registration makes is its own (the broker list is not touched)."""
    image = MetadataImage(cluster_id="c")
    change = rec.apply(image, rec.register_controller_record(
        ControllerRegistration(2, "inc", {}, {})))
    assert change is not None and change.kind == "controllers_changed"
    assert image.brokers == {}
