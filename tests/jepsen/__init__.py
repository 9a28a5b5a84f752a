"""Jepsen-style checks of a 3-broker cluster with real clients (issue 28).

A run drives real confluent-kafka clients — an idempotent producer, transactional producers and a
consume-transform-produce consumer group — while a nemesis kills (-9) and restarts the
transaction coordinator, the group coordinator and partition leaders, and cuts a broker off with
a network partition. Everything the clients were told is recorded as a :class:`History`; the
pure :func:`checker.check` then judges it.

- ``history``: what the clients saw (writes and their outcomes, reads, offsets), nothing else.
- ``checker``: pure functions from a history to anomalies (tests/unit/jepsen proves each fires).
- ``workload``: the client threads and the final read-back.
- ``nemesis``: who holds which role, and the faults.
- ``run``: a run against any :class:`run.Target`; tests/integration/cluster/test_jepsen.py
  gives it a Strom cluster in network namespaces, ``kafka`` an Apache Kafka 4.4 KRaft cluster
  (``python -m tests.jepsen``, ``make jepsen-kafka``).
"""
