"""REST Proxy v3's cluster and broker resources, and the errors every endpoint shares."""

from __future__ import annotations


def test_clusters_and_brokers(rest) -> None:
    status, body = rest.get("/v3/clusters")
    assert status == 200 and body["kind"] == "KafkaClusterList"
    cluster = body["data"][0]
    cid = cluster["cluster_id"]
    assert cluster["metadata"]["self"].endswith(f"/v3/clusters/{cid}")
    assert cluster["metadata"]["resource_name"] == f"crn:///kafka={cid}"
    assert cluster["topics"]["related"].endswith(f"/v3/clusters/{cid}/topics")
    status, one = rest.get(f"/v3/clusters/{cid}")
    assert status == 200 and one == cluster
    status, brokers = rest.get(f"/v3/clusters/{cid}/brokers")
    assert status == 200 and [b["broker_id"] for b in brokers["data"]] == [0]
    port = int(rest.broker.bootstrap.rsplit(":", 1)[1])
    assert brokers["data"][0]["port"] == port
    assert cluster["controller"]["related"] == brokers["data"][0]["metadata"]["self"]
    status, broker = rest.get(f"/v3/clusters/{cid}/brokers/0")
    assert status == 200 and broker == brokers["data"][0]
    status, replicas = rest.get(f"/v3/clusters/{cid}/brokers/0/partition-replicas")
    assert status == 200 and replicas["kind"] == "KafkaReplicaList"
    assert all(r["broker_id"] == 0 and r["is_leader"] for r in replicas["data"])
    # a single node has no reassignment under way (the cluster tests list one)
    status, moving = rest.get(f"/v3/clusters/{cid}/topics/-/partitions/-/reassignment")
    assert (status, moving["kind"], moving["data"]) == (200, "KafkaReassignmentList", [])


def test_errors_are_confluents_bodies(rest) -> None:
    assert rest.get("/v3/clusters/no-such-cluster") == (
        404, {"error_code": 404, "message": "Cluster no-such-cluster cannot be found."})
    status, body = rest.get(f"{rest.v3}/brokers/77")
    assert (status, body["error_code"]) == (404, 404)
    assert rest.get(f"{rest.v3}/brokers/77/partition-replicas") == (
        404, {"error_code": 404, "message": "Broker 77 cannot be found."})
    assert rest.get(f"{rest.v3}/topics/t/partitions/0/reassignment") == (
        404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    assert rest.get("/no/such/path") == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})
    status, body = rest.delete("/v3/clusters")
    assert (status, body["error_code"]) == (405, 405)


def test_openapi_document_lists_every_route(rest) -> None:
    status, doc = rest.get("/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.")
    assert "/v3/clusters/{cluster_id}/brokers/{broker_id}" in doc["paths"]
