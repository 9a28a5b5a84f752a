# Two commands on a fresh machine: `make run` and `make test`. Everything else installs itself.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.stamp-install

.PHONY: run test unit integration lint format bench system-deps c-decoder clean bytecode
.PHONY: fuzz fuzz-seeds
.PHONY: compat-java compat-kafka compat-java-cluster compat-kafka-cluster compat-kafka-libs
.PHONY: jepsen jepsen-kafka java-on-kafka test-kraft test-zookeeper-cluster compat-registry test-iceberg-load issue-time

# pip builds Strom's one C extension (the Spark source's record decoder, setup.py) when a C
# compiler and Python's headers are there, and installs Strom without it otherwise (the Spark
# source then reads through confluent-kafka): `make run` needs neither.
$(STAMP): pyproject.toml setup.py src/strom/record/_columns.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Debian packages the tests drive (kcat; ZooKeeper for the cluster tests; iproute2 for the
# network-namespace partition test; Chromium for the web console's browser test, driven by
# Playwright, which never downloads a browser of its own; a JDK 17+ and Maven for Kafka's own
# tools, the Java clients, Streams/Connect/MirrorMaker 2 and Spark's connector; Node.js and npm
# for Confluent's JavaScript schema-registry client; gcc and Python's headers for the Spark
# source's C record decoder, which the tests need). Installed only when missing; the cluster
# tests start their own private ZooKeeper server. Without apt-get, one line says what to install.
system-deps:
	@missing=""; command -v kcat >/dev/null 2>&1 || missing="$$missing kcat"; \
	  test -f /usr/share/java/zookeeper.jar || missing="$$missing zookeeper"; \
	  command -v ip >/dev/null 2>&1 || missing="$$missing iproute2"; \
	  test -x /usr/bin/chromium || missing="$$missing chromium"; \
	  java_major=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  [ "$${java_major:-0}" -ge 17 ] 2>/dev/null || missing="$$missing default-jdk-headless"; \
	  command -v mvn >/dev/null 2>&1 || missing="$$missing maven"; \
	  command -v node >/dev/null 2>&1 || missing="$$missing nodejs"; \
	  command -v npm >/dev/null 2>&1 || missing="$$missing npm"; \
	  command -v cc >/dev/null 2>&1 || missing="$$missing gcc"; \
	  headers=$$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])'); \
	  test -f "$$headers/Python.h" || missing="$$missing python3-dev"; \
	  if [ -n "$$missing" ]; then \
	    if ! command -v apt-get >/dev/null 2>&1; then \
	      echo "make: no apt-get on this machine: install$$missing (Debian's names: a JDK 17+, Maven, kcat, ZooKeeper's jar at /usr/share/java/zookeeper.jar, iproute2, Chromium at /usr/bin/chromium, nodejs, npm, a C compiler and Python's headers), then run make again" >&2; \
	      exit 1; \
	    fi; \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  fi

# The Spark source's C record decoder, built again when the venv was installed without it (by
# `make run` on a machine that had no C compiler yet; system-deps installs one).
c-decoder: $(STAMP) system-deps
	@$(BIN)/python -c 'import strom.record._columns' 2>/dev/null || \
	  $(BIN)/python -m pip install --quiet --no-deps -e .

# The first run formats ./data for the KRaft node of config/server.properties (a directory
# formatted before, or kept from a single node of an earlier Strom, is left as it is).
# Strom's modules compiled into __pycache__ ahead of time: each broker, `strom` command and helper
# process then loads them instead of compiling about 250 modules again (0.27 s of CPU per process
# here, and the suite starts about a thousand). Python reads these files even when
# PYTHONDONTWRITEBYTECODE (set on this machine) keeps it from writing them.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q -j 0 src >/dev/null

run: $(STAMP) bytecode
	test -f data/meta.properties || $(BIN)/strom storage format \
	  --config config/server.properties --cluster-id "$$($(BIN)/strom storage random-uuid)"
	$(BIN)/strom broker --config config/server.properties

lint: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/mypy

# The suite runs on PYTEST_WORKERS pytest-xdist workers, each test file whole on one worker;
# tests/conftest.py keeps the heaviest files (Spark, Streams/Connect, the Java suite, ...) one
# after another on a single worker. PYTEST_WORKERS=0: everything in one process. Three workers on
# 2 cores: the tests wait (for elections, timeouts, JVMs) about a third of their time, so a third
# worker fills the CPU (measured on a fresh clone: 15.8 min on 3 workers, 23.5 on 2).
PYTEST_WORKERS ?= 3
XDIST = -n $(PYTEST_WORKERS) --dist loadfile

# Each worker collects every test file: pytest rewrites their asserts and compiles them, 22 s of CPU
# per worker here, 7 s when __pycache__ holds the rewritten files already. So one collection with
# bytecode writing on runs beside lint (mypy keeps one core busy) and leaves them there first.
test: $(STAMP) system-deps c-decoder bytecode
	PYTHONDONTWRITEBYTECODE= $(BIN)/pytest -q -p no:cacheprovider --collect-only tests \
	  >/dev/null 2>&1 & collecting=$$!; \
	  $(MAKE) --no-print-directory lint || { kill $$collecting; exit 1; }; \
	  wait $$collecting || true  # a collection error shows in the run below
	$(BIN)/pytest -q -p no:cacheprovider $(XDIST) -m "not confluent_suite and not iceberg_load_cluster" tests

# The Spark lake load into Iceberg on a standalone Spark cluster (PySpark 4.1), with kill -9 of
# the driver and two loads at once (about 65 s alone, six JVMs): too heavy for issue 33's share
# of make test, which reads a table with Spark in tests/integration/spark/test_iceberg_spark_read.py.
test-iceberg-load: $(STAMP) system-deps
	$(BIN)/pytest -q -p no:cacheprovider -m iceberg_load_cluster tests/integration/spark

unit: $(STAMP) bytecode
	$(BIN)/pytest -q tests/unit

integration: $(STAMP) system-deps c-decoder bytecode
	$(BIN)/pytest -q $(XDIST) tests/integration

bench: $(STAMP)
	$(BIN)/python -m bench $(BENCH_ARGS)

# Fuzzing: `make test` runs a short derandomized sample of the fuzz tests; this draws random
# examples for FUZZ_SECONDS (70% in-process decoders, 30% against a live broker), then 20% more
# against the CONTROLLER listeners of a 3-node KRaft cluster.
FUZZ_SECONDS ?= 600
fuzz: $(STAMP)
	FUZZ_SECONDS=$(FUZZ_SECONDS) $(BIN)/pytest -q -s -p no:cacheprovider -o timeout=0 \
	  tests/unit/protocol/test_fuzz_decoders.py tests/integration/test_fuzz_broker.py \
	  tests/integration/cluster/test_fuzz_controller_listener.py

# Recapture the fuzz seed corpus (tests/fuzz/corpus) from real clients.
fuzz-seeds: $(STAMP)
	$(BIN)/python tests/fuzz/capture.py

# Java compatibility suite (compat/java, issue 16): Kafka 4.4's Java client against a fresh Strom
# broker (compat-java) or against Apache Kafka 4.4 itself, a single KRaft node run from Maven Central's
# jars cached outside the repo (compat-kafka); the -cluster targets run the tests tagged "cluster" on
# 3 brokers (ZooKeeper + 3 Strom brokers, or 3 KRaft nodes). `make test` runs the suite through
# tests/integration/java (Strom: all; Kafka: the fast and migration tags, and the cluster tests).
# See docs/kafka-java.md.
COMPAT_MVN := nice -n 10 mvn -q -B -f compat/java/pom.xml
COMPAT_KAFKA_LIBS ?= $(HOME)/.cache/strom-compat/kafka-4.4.0/libs
COMPAT_CLUSTER := -Dgroups=cluster -DexcludedGroups=none
# The Java suite's pytest runs on Apache Kafka 4.4 beside Strom's (make test runs Strom's only).
java-on-kafka: $(STAMP)
	STROM_JAVA_KAFKA=fast $(BIN)/pytest -q -p no:cacheprovider tests/integration/java

compat-java: $(STAMP)
	$(BIN)/python compat/run_broker.py strom --strom $(BIN)/strom -- \
	  $(COMPAT_MVN) test -Dbootstrap={bootstrap} $(COMPAT_ARGS)

compat-java-cluster: $(STAMP) system-deps
	$(BIN)/python compat/run_broker.py strom-cluster --strom $(BIN)/strom -- \
	  $(COMPAT_MVN) test -Dbootstrap={bootstrap} $(COMPAT_CLUSTER) $(COMPAT_ARGS)

# The marker names the broker pom's hash (as compat/kafka_dist.py): a copy made
# from an older pom is fetched again.
COMPAT_KAFKA_MARK = $(COMPAT_KAFKA_LIBS)/.pom-$(shell sha256sum compat/java/kafka-broker/pom.xml | cut -c1-16)
compat-kafka-libs:
	test -f $(COMPAT_KAFKA_MARK) || { rm -rf $(COMPAT_KAFKA_LIBS) && \
	  nice -n 10 mvn -q -B -f compat/java/kafka-broker/pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(COMPAT_KAFKA_LIBS) && \
	  touch $(COMPAT_KAFKA_LIBS)/.complete $(COMPAT_KAFKA_MARK); }

compat-kafka: compat-kafka-libs
	$(PYTHON) compat/run_broker.py kafka --kafka-libs $(COMPAT_KAFKA_LIBS) -- \
	  $(COMPAT_MVN) test -Dbootstrap={bootstrap} $(COMPAT_ARGS)

compat-kafka-cluster: compat-kafka-libs
	$(PYTHON) compat/run_broker.py kafka-cluster --kafka-libs $(COMPAT_KAFKA_LIBS) -- \
	  $(COMPAT_MVN) test -Dbootstrap={bootstrap} $(COMPAT_CLUSTER) $(COMPAT_ARGS)

# Jepsen-style checks (tests/jepsen, docs/clusters.md): `make test` runs a short fixed-seed run on
# Strom (tests/integration/cluster/test_jepsen.py); `make jepsen` runs it for JEPSEN_SECONDS of
# random faults, `make jepsen-kafka` the same workload and checker against 3 Apache Kafka 4.4 KRaft
# nodes. JEPSEN_SEED repeats a run (else a random seed, printed).
JEPSEN_SECONDS ?= 600
# The single-broker integration tests again, each broker a combined KRaft node on a quorum of
# itself (what make run starts) instead of a single node with the embedded metadata log.
test-kraft: $(STAMP)
	STROM_IT_KRAFT=1 $(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile \
	  -m "not legacy_single_node" tests/integration/test_*.py

# the cluster tests on brokers of a ZooKeeper ensemble (legacy mode) instead of KRaft nodes
test-zookeeper-cluster: $(STAMP) system-deps
	STROM_CLUSTER=zookeeper $(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile \
	  tests/integration/cluster tests/integration/frameworks/test_streams_cluster.py

# confluent-kafka-python's own schema-registry integration tests against Strom's registry
# (their ByoFixture). Their test files are fetched from GitHub at the client's tag, or taken
# from STROM_CKP_SOURCE=<a checkout of that tag>.
compat-registry: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m confluent_suite \
	  tests/integration/registry/test_confluent_python_suite.py

jepsen: $(STAMP) system-deps
	JEPSEN_SECONDS=$(JEPSEN_SECONDS) nice -n 10 $(BIN)/pytest -q -s -p no:cacheprovider \
	  tests/integration/cluster/test_jepsen.py

jepsen-kafka: $(STAMP)
	JEPSEN_SECONDS=$(JEPSEN_SECONDS) nice -n 10 $(BIN)/python -m tests.jepsen

format: $(STAMP)
	$(BIN)/ruff check --fix src tests bench

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache

# What one issue's tests add to make test (tests/issue_tests.py): its files alone, run as make
# test runs them. CPU_REPORT=<a STROM_TEST_CPU file> SUITE_WALL=<its pytest seconds> adds their
# share of that full run.
ISSUE ?=
issue-time: $(STAMP) system-deps bytecode
	$(BIN)/python tools/issue_time.py $(ISSUE) --workers $(PYTEST_WORKERS) \
	  $(if $(CPU_REPORT),--cpu-report $(CPU_REPORT)) $(if $(SUITE_WALL),--suite-wall $(SUITE_WALL))
