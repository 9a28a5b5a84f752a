"""DescribeQuorum on the broker listeners of a KRaft node.

Kafka's brokers pass DescribeQuorum on to the active controller, which is how
``kafka-metadata-quorum --bootstrap-server`` and the Java ``Admin.describeMetadataQuorum`` reach
it. A combined node asks its own controller. Only KRaft nodes serve this module
(`strom.broker.app` adds it), so a broker without KRaft does not advertise the API, as a
ZooKeeper-mode Kafka broker did not. It needs DESCRIBE on the cluster, as Kafka's controller
checks.
"""

from __future__ import annotations

from typing import Any

from strom.broker.authz import cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Struct
from strom.protocol.errors import ErrorCode
from strom.security.acl import AclOperation as Op
from strom.security.acl import ResourceType as Res


@handles(ApiKey.DESCRIBE_QUORUM, 0, 2)
@requires(Op.DESCRIBE, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def describe_quorum(broker: Broker, ctx: RequestContext, request: Struct) -> dict[str, Any]:
    if broker.metadata_quorum is None:  # never: the module is served by KRaft nodes only
        return {"error_code": ErrorCode.NOT_CONTROLLER}
    return dict(await broker.metadata_quorum(ApiKey.DESCRIBE_QUORUM, request.to_dict()))
