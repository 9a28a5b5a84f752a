"""Which quota applies (Kafka's precedence), who shares a rate, and the throttle time."""

import pytest

from strom.broker.quotas.clients import MutationQuota
from strom.broker.quotas.manager import QuotaManager, resolve
from strom.cluster.image import MetadataImage
from strom.cluster.quotas import PRODUCER_BYTE_RATE as P
from strom.cluster.quotas import entity
from strom.protocol.errors import ErrorCode, KafkaError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def quotas(*pairs):
    return {e: {P: v} for e, v in pairs}


@pytest.mark.parametrize(("configured", "expected"), [
    # the most specific entity wins, and decides who shares the rate
    ([(entity(user="alice", client_id="app"), 1.0), (entity(user="alice"), 2.0)],
     (1.0, ("alice", "app"))),
    ([(entity(user="alice", client_id=None), 3.0), (entity(user="alice"), 2.0)],
     (3.0, ("alice", "app"))),
    ([(entity(user="alice"), 2.0), (entity(user=None, client_id="app"), 4.0)],
     (2.0, ("alice", ""))),
    ([(entity(user=None, client_id="app"), 4.0), (entity(user=None), 5.0)],
     (4.0, ("alice", "app"))),
    ([(entity(user=None, client_id=None), 6.0), (entity(user=None), 5.0)],
     (6.0, ("alice", "app"))),
    ([(entity(user=None), 5.0), (entity(client_id="app"), 7.0)], (5.0, ("alice", ""))),
    ([(entity(client_id="app"), 7.0), (entity(client_id=None), 8.0)], (7.0, ("", "app"))),
    ([(entity(client_id=None), 8.0)], (8.0, ("", "app"))),
    ([(entity(user="bob"), 9.0), (entity(client_id="other"), 9.0)], None),
])
def test_precedence(configured, expected) -> None:
    assert resolve(quotas(*configured), P, "alice", "app") == expected


def test_a_client_within_its_quota_is_not_throttled_and_one_over_it_is() -> None:
    image, clock = MetadataImage("c"), Clock()
    image.client_quotas = quotas((entity(client_id="app"), 1000.0))
    manager = QuotaManager(P, image, samples=11, window_s=1.0, clock=clock)
    assert manager.record("ANONYMOUS", "app", 10_000) == 0  # 10,000 over the padded 10 s
    clock.now += 0.5
    throttle = manager.record("ANONYMOUS", "app", 5_000)  # 15,000 over 10.5 s
    # Kafka's (O - T) / T * W: what brings 15,000 over W + X down to 1,000/s
    assert throttle == pytest.approx(4_500, rel=0.01)
    assert manager.record("ANONYMOUS", "other", 1_000_000) == 0, "no quota for it"
    assert manager.throttle_now("ANONYMOUS", "app") == throttle


def test_clients_under_one_user_quota_share_it() -> None:
    image, clock = MetadataImage("c"), Clock()
    image.client_quotas = quotas((entity(user="alice"), 1000.0))
    manager = QuotaManager(P, image, clock=clock)
    assert manager.record("alice", "a", 8_000) == 0
    assert manager.record("alice", "b", 8_000) > 0, "the second client adds to the same rate"
    assert list(manager.rates) == [("alice", "")]


def test_quota_changes_apply_at_once() -> None:
    image, clock = MetadataImage("c"), Clock()
    manager = QuotaManager(P, image, clock=clock)
    assert manager.record("u", "app", 1e9) == 0
    image.client_quotas = quotas((entity(client_id="app"), 10.0))
    image.version += 1
    assert manager.record("u", "app", 1000) > 0
    image.client_quotas = {}
    image.version += 1
    assert manager.record("u", "app", 1e9) == 0


def test_request_time_throttles_are_bounded() -> None:
    image, clock = MetadataImage("c"), Clock()
    image.client_quotas = {entity(client_id="app"): {"request_percentage": 1.0}}
    manager = QuotaManager("request_percentage", image, max_throttle_ms=1000, clock=clock)
    assert manager.record("u", "app", 5000.0) == 1000


def test_taking_back_bytes_not_sent() -> None:
    image, clock = MetadataImage("c"), Clock()
    image.client_quotas = quotas((entity(client_id="app"), 1000.0))
    manager = QuotaManager(P, image, clock=clock)
    assert manager.record("u", "app", 50_000) > 0
    manager.unrecord("u", "app", 50_000)
    assert manager.throttle_now("u", "app") == 0


def test_strict_mutation_quotas_refuse_once_over_and_permissive_ones_never() -> None:
    image, clock = MetadataImage("c"), Clock()
    image.client_quotas = {entity(client_id="admin"): {"controller_mutation_rate": 1.0}}
    manager = QuotaManager("controller_mutation_rate", image, clock=clock)
    strict = MutationQuota(manager, "u", "admin", strict=True)
    strict.take(30)  # allowed: not over before it, over after it
    assert strict.throttle_ms > 0
    with pytest.raises(KafkaError) as refused:
        strict.take(1)
    assert refused.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    permissive = MutationQuota(manager, "u", "admin", strict=False)
    permissive.take(5)
    assert permissive.throttle_ms > 0
