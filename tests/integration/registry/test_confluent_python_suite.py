"""confluent-kafka-python's own schema-registry integration tests, run against Strom (issue 31
point 3) through their ``ByoFixture``: a Strom broker with its registry is the "bring your own"
cluster, handed to their conftest in the two environment variables it reads (BROKERS for the
bootstrap servers, SR_URL for the registry), and their tests/integration/schema_registry runs on
pytest in a subprocess.

Their tests are not in this repository: the copy is the client's release tag, v2.16.1 (the version
the test extras pin), fetched on first use from the tag's source archive into
~/.cache/strom-compat (PyPI's sdist of the release has no tests/), or taken from a checkout of that
tag named by STROM_CKP_SOURCE. Their test-only packages (pytest-asyncio, trivup, which their
conftest imports, and the CEL rule executor's packages for their DLQ test) are installed, pinned,
with ``pip install --target`` into the same cache. Both are filled under a file lock and renamed
into place, as compat/kafka_dist.py does for Kafka's jars.

Every test of theirs runs unless SKIPS below names it, with its reason; an entry that matches none
of their tests fails the run, and so does a skip of theirs inside the run. Their ByoFixture lacks
the ``async_schema_registry`` their _async tests use (only their trivup fixture has it):
confluent_suite/strom_byo_plugin.py adds it for the same URL, and deselects SKIPS.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ..broker import BrokerProcess
from .test_registry_api import registry  # noqa: F401  (the fixture)

# behind `make compat-registry`: their tests come from GitHub, which CI cannot reach
pytestmark = pytest.mark.confluent_suite

CKP_VERSION = "2.16.1"
ARCHIVE_URL = ("https://github.com/confluentinc/confluent-kafka-python/archive/refs/tags/"
               f"v{CKP_VERSION}.tar.gz")
SOURCE_ENV = "STROM_CKP_SOURCE"  # a checkout of the tag, instead of the download
CACHE = Path.home() / ".cache" / "strom-compat" / f"confluent-kafka-python-{CKP_VERSION}"
PLUGIN_DIR = Path(__file__).resolve().parent / "confluent_suite"
FETCH_TIMEOUT = 300.0
RUN_TIMEOUT = 240.0
# Their test-only packages, pinned, installed without their dependencies (the rest is in the venv):
# pytest-asyncio for the _async tests; trivup and what it imports, since their conftest imports it
# (its clusters are never started: ByoFixture); cel-python and its packages for test_dlq's CEL rule.
TEST_PACKAGES = (
    "pytest-asyncio==1.5.0",
    "trivup==0.12.2", "jwcrypto==1.6.1", "python-jwt==4.1.0",
    "cel-python==0.5.0", "jmespath==1.1.0", "lark==1.3.1", "pendulum==3.3.0", "PyYAML==6.0.4",
)
SR = "tests/integration/schema_registry"
# Budget: each of their serializer tests sleeps 1 s after creating its topic
# (create_topic_and_wait_propogation) and then produces and consumes, about 1.3 s in all: the
# whole of their suite (about 100 tests) is 85-90 s here, so the serializer tests that only repeat
# registry requests another selected test makes (other primitive types, client-side hooks and
# type checks, the async twins) are left out for time, each named below.
_TIME = "time budget (about 25 s for this run): "
_ASYNC_SERDES = (_TIME + "the async serializers make the same registry requests as their sync "
                 "twins, which run; the async client's HTTP paths run in _async/test_api_client.py")
SKIPS: dict[str, str] = {
    # components Strom's registry lacks, or a second cluster of another version
    f"{SR}/_sync/test_api_client.py::test_api_get_register_schema_invalid"
    "[kafka_cluster_cp_7_0_1-500-500]":
        "needs a second cluster running Confluent Platform 7.0.1, whose registry answered 500 "
        "where current ones answer 422 (their trivup fixture downloads and starts one); the "
        "kafka_cluster case of the same test (422/42201) runs against Strom",
    f"{SR}/_async/test_api_client.py::test_api_get_register_schema_invalid"
    "[kafka_cluster_cp_7_0_1-500-500]":
        "as its sync twin: a Confluent Platform 7.0.1 cluster started by trivup",
    f"{SR}/_sync/test_associated_cluster_id.py":
        "Confluent's resource associations API (/associations), which Strom's registry does "
        "not serve",
    f"{SR}/_async/test_associated_cluster_id.py":
        "Confluent's resource associations API (/associations), which Strom's registry does "
        "not serve",
    # time
    f"{SR}/_async/test_avro_serializers.py": _ASYNC_SERDES,
    f"{SR}/_async/test_json_serializers.py": _ASYNC_SERDES,
    f"{SR}/_async/test_proto_serializers.py": _ASYNC_SERDES,
    f"{SR}/_async/test_dlq.py": _ASYNC_SERDES,
    **{f"{SR}/_sync/test_avro_serializers.py::test_avro_record_serialization[{case}]":
       _TIME + "a primitive schema: the same registry requests as the basic_schema.avsc case"
       for case in ("primitive_string.avsc-J\\xe4mtland-string", "primitive_bool.avsc-True-bool",
                    "primitive_float.avsc-32768.2342-float",
                    "primitive_double.avsc-68.032768-float")},
    f"{SR}/_sync/test_avro_serializers.py::test_delivery_report_serialization":
        _TIME + "test_avro_record_serialization's serializer and registry requests, checked in "
        "the delivery report",
    f"{SR}/_sync/test_avro_serializers.py::test_avro_record_serialization_custom":
        _TIME + "client-side to_dict/from_dict hooks; the registry sees what "
        "test_avro_record_serialization sends",
    f"{SR}/_sync/test_json_serializers.py::test_json_record_serialization_custom":
        _TIME + "client-side to_dict/from_dict hooks; the registry sees what "
        "test_json_record_serialization sends",
    f"{SR}/_sync/test_json_serializers.py::test_json_reference_custom":
        _TIME + "client-side hooks over test_json_reference's registrations",
    f"{SR}/_sync/test_json_serializers.py::test_json_record_serialization_incompatible":
        _TIME + "the serializer's own validation of a record, before any registry request",
    f"{SR}/_sync/test_json_serializers.py::test_json_record_deserialization_mismatch":
        _TIME + "the deserializer's own validation of a record against a schema it was given",
    f"{SR}/_sync/test_proto_serializers.py::test_protobuf_message_serialization[TestMessage-data0]":
        _TIME + "the NestedMessage case makes the same kind of requests, with more references",
    f"{SR}/_sync/test_proto_serializers.py::test_protobuf_message_serialization[TestMessage-data1]":
        _TIME + "the NestedMessage case makes the same kind of requests, with more references",
    f"{SR}/_sync/test_proto_serializers.py::test_protobuf_serializer_type_mismatch":
        _TIME + "the serializer's own type check, before any registry request",
    f"{SR}/_sync/test_proto_serializers.py::test_protobuf_deserializer_type_mismatch":
        _TIME + "the deserializer's own type check of a message",
}


# ------------------------------------------------------------------------------ their tests


def _locked(name: str):
    CACHE.mkdir(parents=True, exist_ok=True)
    lock = open(CACHE / f".{name}.lock", "w")  # noqa: SIM115  (closed by the caller's with)
    fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be filling it: wait for it
    return lock


def source_tree() -> Path:
    """A directory holding their tests/ (and pyproject.toml, their pytest settings) of the tag."""
    given = os.environ.get(SOURCE_ENV)
    if given:
        root = Path(given).expanduser()
        if not (root / SR).is_dir():
            pytest.fail(f"{SOURCE_ENV}={given} has no {SR} (a checkout of v{CKP_VERSION})")
        return root
    target = CACHE / "src"
    if (target / ".complete").exists():
        return target
    with _locked("src"):
        if (target / ".complete").exists():
            return target
        try:
            with urllib.request.urlopen(ARCHIVE_URL, timeout=FETCH_TIMEOUT) as resp:
                archive = resp.read()
        except OSError as e:
            pytest.fail(f"cannot fetch confluent-kafka-python v{CKP_VERSION}'s tests from "
                        f"{ARCHIVE_URL} ({e}); set {SOURCE_ENV} to a checkout of the tag")
        tmp = target.with_name(f"src.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            wanted = []
            for member in tar.getmembers():
                _top, _, rest = member.name.partition("/")
                if rest == "pyproject.toml" or rest.startswith("tests/"):
                    member.name = rest
                    wanted.append(member)
            tar.extractall(tmp, members=wanted, filter="data")
        version = tomllib.loads((tmp / "pyproject.toml").read_text())["project"]["version"]
        if version != CKP_VERSION or not (tmp / SR).is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.fail(f"{ARCHIVE_URL} holds version {version}, not {CKP_VERSION}, or no {SR}")
        (tmp / ".sha256").write_text(hashlib.sha256(archive).hexdigest() + "\n")
        (tmp / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target


def their_packages() -> Path:
    """Their test-only packages, pinned, in a directory for PYTHONPATH."""
    key = hashlib.sha256("\n".join(TEST_PACKAGES).encode()).hexdigest()[:16]
    target = CACHE / f"site-{key}"
    if (target / ".complete").exists():
        return target
    with _locked("site"):
        if (target / ".complete").exists():
            return target
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = ["nice", "-n", "10", sys.executable, "-m", "pip", "install", "--quiet",
               "--no-deps", "--target", str(tmp), *TEST_PACKAGES]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.fail(f"pip install of their test packages failed:\n{proc.stdout[-3000:]}\n"
                        f"{proc.stderr[-3000:]}")
        (tmp / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target


# ------------------------------------------------------------------------------ the run


def outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """test id -> ("passed" | "failed" | "skipped", message) from their run's JUnit report."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        state, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                state = "skipped" if tag == "skipped" else "failed"
                message = (found.get("message") or "") + "\n" + (found.text or "")[-2500:]
                break
        out[name] = (state, message)
    return out


@pytest.mark.timeout(2 * FETCH_TIMEOUT + RUN_TIMEOUT)  # the first run on a machine fetches
def test_confluent_python_schema_registry_suite(request: pytest.FixtureRequest,
                                                tmp_path: Path) -> None:
    installed = importlib.metadata.version("confluent-kafka")
    assert installed == CKP_VERSION, f"their tests are v{CKP_VERSION}'s, the client is {installed}"
    src = source_tree()
    site = their_packages()
    broker: BrokerProcess
    url: str
    broker, url = request.getfixturevalue("registry")  # started once their tests are there

    skips = tmp_path / "skips.json"
    skips.write_text(json.dumps(SKIPS))
    junit = tmp_path / "junit.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env.update(BROKERS=broker.bootstrap, SR_URL=url, STROM_CKP_SKIPS=str(skips),
               PYTHONPATH=os.pathsep.join((str(site), str(PLUGIN_DIR))))
    cmd = [sys.executable, "-m", "pytest", SR, "-p", "strom_byo_plugin", "-p", "no:cacheprovider",
           "-p", "no:xdist", "-q", "-rfEs", "-o", "asyncio_mode=auto",
           "-o", "asyncio_default_fixture_loop_scope=function", "--timeout", "60",
           f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    wall = time.monotonic() - started
    report = (f"exit {proc.returncode} after {wall:.1f} s\n{proc.stdout[-6000:]}\n"
              f"{proc.stderr[-3000:]}")
    assert junit.exists(), report
    seen = outcomes(junit)
    failed = {k: m for k, (s, m) in seen.items() if s == "failed"}
    skipped = {k: m for k, (s, m) in seen.items() if s == "skipped"}
    assert not failed, f"their tests failed against Strom: {sorted(failed)}\n{report}"
    assert not skipped, f"their tests skipped themselves (only SKIPS may leave one out): {skipped}"
    assert proc.returncode == 0, report
    # their run did run: the API client tests and the serializers' (55 tests of theirs, ~18 s here)
    ran_files = {k.split("::", 1)[0] for k in seen}
    for module in ("_sync.test_api_client", "_async.test_api_client", "_sync.test_avro_serializers",
                   "_sync.test_json_serializers", "_sync.test_proto_serializers"):
        assert any(f.endswith(module) for f in ran_files), (module, sorted(ran_files))
    print(f"their suite: {len(seen)} passed in {wall:.1f} s, {len(SKIPS)} skip entries")
