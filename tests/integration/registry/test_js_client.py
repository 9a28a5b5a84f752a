"""A second client from another ecosystem (issue 31 point 3): Confluent's JavaScript Schema
Registry client and Avro serdes, `@confluentinc/schemaregistry` from npm, against Strom's registry.

js/ is a small npm project (exact versions in its package.json and package-lock.json) whose
avro_roundtrip.js registers an Avro schema, serializes a record with the client's AvroSerializer,
reads it back with an AvroDeserializer whose client has an empty cache, registers a compatible
next version and has a breaking one refused, printing what it saw as JSON. `npm ci` runs once per
lock file into ~/.cache/strom-compat (a directory named after the lock file's hash, filled under a
file lock and renamed into place, as compat/kafka_dist.py does for Kafka's jars); the script runs
from the repository with NODE_PATH pointing at the cached node_modules. Node.js and npm are
Debian's packages `nodejs` and `npm` (`make test` installs them when missing); without them the
test is skipped, which CI=true turns into a failure (tests/conftest.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from .test_registry_api import http, registry  # noqa: F401  (the fixture)

JS_DIR = Path(__file__).resolve().parent / "js"
SCRIPT = JS_DIR / "avro_roundtrip.js"
CACHE_ROOT = Path.home() / ".cache" / "strom-compat"
NPM_CI_TIMEOUT = 900.0  # a first download over a slow link; bounded all the same
RUN_TIMEOUT = 60.0
# what avro_roundtrip.js serializes (its RECORD)
RECORD = {"id": 42, "item": "ünïcode kettle", "price": 19.5, "tags": ["kitchen", "sale"]}


def lock_hash() -> str:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update((JS_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def modules_dir() -> Path:
    return CACHE_ROOT / f"js-schemaregistry-{lock_hash()}"


def is_cached() -> bool:
    return (modules_dir() / ".complete").exists()


def ensure_node_modules() -> Path:
    """The cached ``node_modules`` of js/package-lock.json, installed with ``npm ci`` if missing."""
    target = modules_dir()
    if (target / ".complete").exists():
        return target / "node_modules"
    CACHE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(CACHE_ROOT / ".fetch-js-schemaregistry.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be installing: wait for it
        if (target / ".complete").exists():
            return target / "node_modules"
        tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        for name in ("package.json", "package-lock.json"):
            shutil.copy2(JS_DIR / name, tmp / name)
        # --ignore-scripts: the one install script in the tree (protobufjs's) only prints a hint
        cmd = ["nice", "-n", "10", "npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"]
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True,
                              timeout=NPM_CI_TIMEOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0 or not (tmp / "node_modules" / "@confluentinc").is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.fail(f"npm ci for {JS_DIR} failed ({proc.returncode}):\n"
                        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        (tmp / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    return target / "node_modules"


@pytest.mark.timeout(NPM_CI_TIMEOUT + 120)  # the first run on a machine installs the npm tree
def test_confluent_js_client_and_avro_serdes(request: pytest.FixtureRequest) -> None:
    needed = ("node",) if is_cached() else ("node", "npm")
    missing = [tool for tool in needed if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (Debian packages nodejs and npm; "
                    "`make test` installs them)")
    node_modules = ensure_node_modules()
    _broker, url = request.getfixturevalue("registry")  # started once the tools are there
    topic = "js-orders"
    proc = subprocess.run(["node", str(SCRIPT), url, topic], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT, env={**os.environ, "NODE_PATH": str(node_modules)},
                          stdin=subprocess.DEVNULL)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, (proc.returncode, proc.stdout[-3000:],
                                            proc.stderr[-3000:])
    out: dict[str, Any] = json.loads(lines[-1])
    subject = f"{topic}-value"

    # the id the JS client got is the one Strom's registry serves for version 1
    assert http(f"{url}/subjects/{subject}/versions/1")[1]["id"] == out["id"]
    assert out["latest"] == {"id": out["id"], "version": 1, "schemaType": "AVRO"}

    # Confluent's wire format: magic byte 0, the 4-byte id, then the Avro body
    wire = bytes.fromhex(out["bytesHex"])
    assert wire[0] == 0 and int.from_bytes(wire[1:5], "big") == out["id"]
    assert out["decoded"] == RECORD  # the JS deserializer, its schema fetched by id

    # the Python client reads what the JS serializer wrote, through the same registry
    py = AvroDeserializer(SchemaRegistryClient({"url": url}))
    assert py(wire, SerializationContext(topic, MessageField.VALUE)) == RECORD

    # evolution: a compatible v2 got a new id; the breaking one was refused with Confluent's 409
    assert out["v2Id"] not in (None, out["id"])
    assert out["versions"] == [1, 2]
    breaking = out["breaking"]
    assert (breaking["refused"], breaking["status"], breaking["errorCode"]) == (True, 409, 409)
    assert "incompatible" in breaking["message"]
