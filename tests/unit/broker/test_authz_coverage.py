"""Every API the broker serves was looked at for its ACL checks (strom.broker.authz)."""

from strom.broker.authz import CHECKED_APIS, UNCHECKED_APIS
from strom.protocol.api_keys import ApiKey


def test_every_served_api_is_authorized_or_exempt(broker_harness) -> None:
    served = {ApiKey(k) for k in broker_harness.router.routes}
    assert served - CHECKED_APIS - UNCHECKED_APIS == set()
    assert not CHECKED_APIS & UNCHECKED_APIS
    # the quorum's APIs are served by KRaft nodes only (strom.broker.handlers.quorum)
    assert (CHECKED_APIS | UNCHECKED_APIS) - served == {
        ApiKey.DESCRIBE_QUORUM, ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER,
        ApiKey.UNREGISTER_BROKER, ApiKey.UNREGISTER_CONTROLLER}
