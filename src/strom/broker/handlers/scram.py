"""AlterUserScramCredentials and DescribeUserScramCredentials, with the checks and messages of
Kafka's ScramControlManager and ScramImage.

Clients send the salted password (Hi(password, salt, iterations)), never the password; the
broker keeps the salt, StoredKey, ServerKey and iteration count as user configs in the cluster
metadata (strom.security.scram_store)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from strom.broker.authz import Op, Res, cluster_allowed, cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    AlterUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequest,
)
from strom.broker.router import handles
from strom.cluster.controller import too_many_records
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.sasl.mechanisms import (
    SCRAM_MAX_ITERATIONS,
    SCRAM_MIN_ITERATIONS,
    credential_from_salted_password,
)
from strom.security.scram_store import credential_to_config, credentials_of

# Kafka's ScramMechanism type codes on the wire
MECHANISM_BY_TYPE = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
TYPE_BY_MECHANISM = {v: k for k, v in MECHANISM_BY_TYPE.items()}


@handles(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def alter_user_scram_credentials(broker: Broker, ctx: RequestContext,
                                       request: AlterUserScramCredentialsRequest) -> dict[str, Any]:
    deletions, upsertions = request.deletions, request.upsertions
    names = [d.name for d in deletions] + [u.name for u in upsertions]
    if not cluster_allowed(broker, ctx, Op.ALTER):
        return {"throttle_time_ms": 0, "results": [
            _result(n, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            for n in dict.fromkeys(names)]}
    error = too_many_records(len(names), "Unable to alter more than 10000 user credentials in "
                                         "one request")
    if error is not None:
        return {"throttle_time_ms": 0,
                "results": [_result(n, error.code, error.message) for n in dict.fromkeys(names)]}
    counts = Counter(names)
    results: dict[str, dict[str, Any]] = {}
    changes: dict[str, dict[str, str | None]] = {}
    existing = broker.image.user_configs
    for d in deletions:
        problem = _check(d.name, d.mechanism, counts)
        if problem is None:
            mechanism = MECHANISM_BY_TYPE[d.mechanism]
            if mechanism not in credentials_of(existing, d.name):
                problem = (ErrorCode.RESOURCE_NOT_FOUND,
                           "Attempt to delete a user credential that does not exist")
            else:
                changes.setdefault(d.name, {})[mechanism] = None
        results[d.name] = _result(d.name, *(problem or (ErrorCode.NONE, None)))
    for u in upsertions:
        problem = _check(u.name, u.mechanism, counts)
        if problem is None and u.iterations < SCRAM_MIN_ITERATIONS:
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
        elif problem is None and u.iterations > SCRAM_MAX_ITERATIONS:
            problem = (ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
        if problem is None:
            mechanism = MECHANISM_BY_TYPE[u.mechanism]
            credential = credential_from_salted_password(mechanism, bytes(u.salt),
                                                         bytes(u.salted_password), u.iterations)
            changes.setdefault(u.name, {})[mechanism] = credential_to_config(credential)
        results[u.name] = _result(u.name, *(problem or (ErrorCode.NONE, None)))
    for name, change in changes.items():
        await broker.controller.alter_configs("user", name, change)
    return {"throttle_time_ms": 0, "results": list(results.values())}


def _check(name: str, mechanism: int, counts: Counter[str]) -> tuple[ErrorCode, str] | None:
    if counts[name] > 1:
        return (ErrorCode.DUPLICATE_RESOURCE,
                "A user credential cannot be altered twice in the same request")
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in MECHANISM_BY_TYPE:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _result(user: str, code: int, message: str | None) -> dict[str, Any]:
    return {"user": user, "error_code": code, "error_message": message}


@handles(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
@requires(Op.DESCRIBE, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
def describe_user_scram_credentials(broker: Broker, ctx: RequestContext,
                                    request: DescribeUserScramCredentialsRequest) -> dict[str, Any]:
    configs = broker.image.user_configs
    wanted = [u.name for u in request.users] if request.users else None
    if wanted is None:
        wanted = sorted(name for name in configs if credentials_of(configs, name))
    counts = Counter(wanted)
    results = []
    for name in dict.fromkeys(wanted):
        if counts[name] > 1:
            results.append({"user": name, "error_code": ErrorCode.DUPLICATE_RESOURCE,
                            "error_message": "Cannot describe SCRAM credentials for the same "
                                             f"user twice in a single request: {name}",
                            "credential_infos": []})
            continue
        found = credentials_of(configs, name)
        if not found:
            results.append({"user": name, "error_code": ErrorCode.RESOURCE_NOT_FOUND,
                            "error_message": "Attempt to describe a user credential that does "
                                             f"not exist: {name}",
                            "credential_infos": []})
            continue
        results.append({"user": name, "error_code": ErrorCode.NONE, "error_message": None,
                        "credential_infos": [
                            {"mechanism": TYPE_BY_MECHANISM[m], "iterations": c.iterations}
                            for m, c in sorted(found.items())]})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "results": results}
