"""The broker's one hook for coordinator replies: held until their state is committed."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace
from typing import Any

from strom.broker import handlers
from strom.broker.commit_gate import COMMITTED_APIS, answered_once_committed, fail_successes
from strom.coordinator.runtime.commits import Commits, touch
from strom.protocol.errors import ErrorCode as E

from ..coordinator.runtime.fakes import HeldReplication

T = "__consumer_offsets"


def test_every_claimed_success_becomes_the_failure() -> None:
    reply = {"throttle_time": 0, "error_code": 0, "topics": [
        {"name": "a", "partitions": [{"partition_index": 0, "error_code": 0},
                                     {"partition_index": 1, "error_code": 22}]}],
        "results_by_topic_v3_and_below": [{"results_by_partition": [
            {"partition_index": 0, "partition_error_code": 0}]}]}
    fail_successes(reply, E.COORDINATOR_NOT_AVAILABLE)
    assert reply["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert [p["error_code"] for p in reply["topics"][0]["partitions"]] == [15, 22]
    assert reply["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"] == 15
    assert reply["throttle_time"] == 0


def _handler(partition: int) -> Any:
    def handle(broker: Any, ctx: Any, request: Any) -> dict[str, Any]:
        touch(T, partition)
        return {"error_code": 0}

    return answered_once_committed(handle)


def test_a_reply_waits_for_what_the_request_touched() -> None:
    async def scenario() -> None:
        replication = HeldReplication()
        broker = SimpleNamespace(commits=Commits(replication))
        replication.ends[(T, 3)] = 10
        reply = asyncio.ensure_future(_handler(3)(broker, None, None))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not reply.done()
        replication.commit(T, 3, 10)
        assert await asyncio.wait_for(reply, 5) == {"error_code": 0}

    asyncio.run(scenario())


def test_a_reply_whose_state_is_not_replicated_claims_no_success() -> None:
    async def scenario() -> dict[str, Any]:
        replication = HeldReplication()
        broker = SimpleNamespace(commits=Commits(replication))
        replication.ends[(T, 3)] = 10
        reply = asyncio.ensure_future(_handler(3)(broker, None, None))
        await asyncio.sleep(0)
        replication.fail(E.REQUEST_TIMED_OUT)
        return await asyncio.wait_for(reply, 5)

    assert asyncio.run(scenario()) == {"error_code": E.COORDINATOR_NOT_AVAILABLE}


def test_a_single_node_answers_directly() -> None:
    broker = SimpleNamespace(commits=Commits(None))
    assert _handler(0)(broker, None, None) == {"error_code": 0}


def test_every_coordinator_api_is_held() -> None:
    """Each API whose handler lives with the coordinators' handlers is in COMMITTED_APIS,
    except those that read no coordinator state or are not answered by a coordinator."""
    from strom.protocol.api_keys import ApiKey as K

    not_coordinator_state = {K.FIND_COORDINATOR, K.LIST_GROUPS, K.WRITE_TXN_MARKERS,
                             K.LIST_TRANSACTIONS}
    modules = [getattr(handlers, n) for n in ("groups", "consumer_groups", "streams_groups",
                                              "share_groups", "share_state", "share_offsets",
                                              "transactions")]
    served = {fn.__strom_api__.api_key for m in modules for _, fn in inspect.getmembers(m)
              if hasattr(fn, "__strom_api__")}
    assert served - not_coordinator_state <= COMMITTED_APIS
    assert K.INIT_PRODUCER_ID in COMMITTED_APIS
