"""`strom storage format` / `random-uuid` (strom.cli.storage): the files Kafka 4.4's
``kafka-storage format`` writes, its refusals as one line, and the result read back with
Strom's snapshot reader. One test runs Kafka's own tool on the same inputs when its jars are in
``~/.cache/strom-compat`` (skipped otherwise)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from strom.cli.main import app
from strom.cli.storage import (
    FormatOptions,
    feature_level_record,
    format_storage,
    metadata_version_level,
    parse_feature_level_record,
)
from strom.cluster.scram_records import parse_user_scram_credential_record
from strom.raft.snapshot import load_snapshot
from strom.storage.checkpoints import topic_id_from_str

runner = CliRunner()
CLUSTER = "MkU3OEVBNTcwNTJENDM2Qg"
CHECKPOINT = "__cluster_metadata-0/00000000000000000000-0000000000.checkpoint"
KAFKA_LIBS = Path.home() / ".cache/strom-compat/kafka-4.4.0/libs"
DIR_1 = "GCBT0Dg3TtWNIOT358XgEA"
DIR_2 = "AJZ5lFWae5i3YH5t-XKHDg"
FIXED_SCRAM = ('SCRAM-SHA-256=[name=alice,iterations=8192,salt="MWx2NHBkbnc0ZndxN25vdGN4bTB5eTFr'
               'N3E=",saltedpassword="mT0yyUUxnlJaC99HXgRTSYlbuqa4FSGtJCJfTMvjYCE="]')


def props(tmp: Path, *, roles: str = "controller", voters: str | None = None) -> Path:
    listener = "CONTROLLER://localhost:19093" if roles == "controller" else \
        "PLAINTEXT://localhost:19092"
    quorum = (f"controller.quorum.voters={voters}" if voters
              else "controller.quorum.bootstrap.servers=localhost:19093")
    path = tmp / "server.properties"
    path.write_text(f"process.roles={roles}\nnode.id=1\ncontroller.listener.names=CONTROLLER\n"
                    f"listeners={listener}\nlog.dirs={tmp}/d1,{tmp}/d2\n"
                    f"metadata.log.dir={tmp}/meta\n{quorum}\n")
    return path


def meta(d: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in d.joinpath("meta.properties").read_text()
                .splitlines() if "=" in line and not line.startswith("#"))


def features(snapshot_path: Path) -> dict[str, int]:
    return dict(parse_feature_level_record(v) for v in load_snapshot(snapshot_path).values
                if v[:3] == b"\x01\x0c\x00")  # FeatureLevelRecord v0


def scram_values(snapshot_path: Path) -> list[bytes]:
    return [v for v in load_snapshot(snapshot_path).values if v[:3] == b"\x01\x0b\x00"]


def fmt(tmp: Path, *args: str, config: Path | None = None) -> tuple[int, str, str]:
    res = runner.invoke(app, ["storage", "format", "-c", str(config or props(tmp)),
                              "-t", CLUSTER, *args])
    return res.exit_code, res.stdout, res.stderr


def test_feature_level_record_is_kafkas_encoding() -> None:
    # Bytes of Kafka 4.4's own bootstrap snapshot (metadata.version 33, transaction.version 2).
    assert feature_level_record("metadata.version", 33).hex() == \
        "010c00116d657461646174612e76657273696f6e002100"
    assert feature_level_record("transaction.version", 2).hex() == \
        "010c00147472616e73616374696f6e2e76657273696f6e000200"
    assert parse_feature_level_record(feature_level_record("group.version", 1)) == \
        ("group.version", 1)


def test_release_versions() -> None:
    assert metadata_version_level("3.3-IV3") == 7
    assert metadata_version_level("3.9") == 21
    assert metadata_version_level("4.0") == 25  # a release means its last level
    assert metadata_version_level("4.4-IV2") == 33


def test_standalone_writes_meta_properties_and_bootstrap_snapshot(tmp_path: Path) -> None:
    code, out, err = fmt(tmp_path, "--standalone")
    assert code == 0, err
    assert "Formatting dynamic metadata voter directory" in out
    ids = set()
    for d in ("d1", "d2", "meta"):
        m = meta(tmp_path / d)
        assert (m["version"], m["cluster.id"], m["node.id"]) == ("1", CLUSTER, "1")
        assert len(m["directory.id"]) == 22
        ids.add(m["directory.id"])
    assert len(ids) == 3
    assert not (tmp_path / "d1" / "__cluster_metadata-0").exists()
    snap = load_snapshot(tmp_path / "meta" / CHECKPOINT)
    assert snap.kraft_version == 1
    assert snap.voters is not None
    (voter,) = snap.voters.voters
    assert voter.voter_id == 1
    assert voter.directory_id == topic_id_from_str(meta(tmp_path / "meta")["directory.id"])
    assert [(e.name, e.host, e.port) for e in voter.endpoints] == \
        [("CONTROLLER", "localhost", 19093)]
    assert features(tmp_path / "meta" / CHECKPOINT) == {
        "metadata.version": 33, "group.version": 1, "share.version": 2,
        "streams.version": 1, "transaction.version": 2}


def test_initial_controllers_and_no_initial_controllers(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    code, _, err = fmt(a, "-I", f"1@localhost:19093:{DIR_1},2@localhost:19094:{DIR_2}")
    assert code == 0, err
    assert meta(a / "meta")["directory.id"] == DIR_1
    snap = load_snapshot(a / "meta" / CHECKPOINT)
    assert snap.voters is not None
    assert [(v.voter_id, v.endpoints[0].port) for v in snap.voters.voters] == \
        [(1, 19093), (2, 19094)]
    code, out, err = fmt(b, "-N", "-r", "3.9")
    assert code == 0, err
    assert "with metadata.version 3.9-IV0" in out
    snap = load_snapshot(b / "meta" / CHECKPOINT)
    assert (snap.kraft_version, snap.voters) == (1, None)
    assert features(b / "meta" / CHECKPOINT) == {"metadata.version": 21}


def test_static_quorum_and_features(tmp_path: Path) -> None:
    config = props(tmp_path, voters="1@localhost:19093")
    code, out, err = fmt(tmp_path, "-r", "4.2-IV0", "-f", "group.version=0",
                         "--feature", "transaction.version=1", config=config)
    assert code == 0, err
    assert "Formatting metadata directory" in out
    snap = load_snapshot(tmp_path / "meta" / CHECKPOINT)
    assert (snap.kraft_version, snap.voters) == (0, None)
    assert features(tmp_path / "meta" / CHECKPOINT) == {
        "metadata.version": 28, "share.version": 1, "transaction.version": 1}


def test_broker_gets_no_snapshot(tmp_path: Path) -> None:
    code, _, err = fmt(tmp_path, config=props(tmp_path, roles="broker"))
    assert code == 0, err
    assert meta(tmp_path / "meta")["node.id"] == "1"
    assert not (tmp_path / "meta" / "__cluster_metadata-0").exists()


@pytest.mark.parametrize(("args", "voters", "roles", "message"), [
    ((), None, "controller", "Because controller.quorum.voters is not set on this controller"),
    (("-s",), "1@localhost:19093", "controller",
     "You cannot specify controller.quorum.voters and format the node with"),
    (("-s",), None, "broker", "You can only use --standalone on a controller."),
    (("-s", "-N"), None, "controller",
     "argument --no-initial-controllers/-N: not allowed with argument --standalone/-s"),
    (("-N", "-r", "9.9"), None, "controller", "Unknown metadata.version '9.9'"),
    (("-N", "-f", "foo.version=1"), None, "controller", "Unsupported feature: foo.version."),
    (("-N", "-f", "group.version=9"), None, "controller", "No feature:group.version with"),
    (("-s", "-f", "kraft.version=0"), None, "controller", "Cannot set kraft.version to 0"),
    (("-s", "--add-scram", "SCRAM-SHA-256=[name=a]"), None, "controller",
     "You must supply one of 'password' or 'saltedpassword' to add-scram"),
    (("-s", "-S", "SCRAM-SHA-1=[name=a,password=b]"), None, "controller",
     "The add-scram mechanism SCRAM-SHA-1 is not supported."),
    (("-s", "-S", "SCRAM-SHA-256=[name=a,password=b,iterations=100]"), None, "controller",
     "The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-256"),
    (("-I", "1@localhost:19093"), None, "controller", "Invalid value 1@localhost:19093"),
])
def test_refusals_are_one_line(tmp_path: Path, args: tuple[str, ...], voters: str | None,
                               roles: str, message: str) -> None:
    code, _out, err = fmt(tmp_path, *args, config=props(tmp_path, roles=roles, voters=voters))
    assert code != 0
    assert err.startswith("Error: ") and message in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "meta").exists()


def test_already_formatted_and_ignore_formatted(tmp_path: Path) -> None:
    config = props(tmp_path)
    assert fmt(tmp_path, "-N", config=config)[0] == 0
    first = meta(tmp_path / "meta")
    code, _, err = fmt(tmp_path, "-N", config=config)
    assert code == 1 and "is already formatted. Use --ignore-formatted" in err
    shutil.rmtree(tmp_path / "d2")
    code, out, err = fmt(tmp_path, "-N", "-g", config=config)
    assert code == 0, err
    assert out.strip() == f"Formatting data directory {tmp_path}/d2 with metadata.version 4.4-IV2."
    assert meta(tmp_path / "meta") == first
    code, out, _ = fmt(tmp_path, "-N", "-g", config=config)
    assert (code, out.strip()) == (0, "All of the log directories are already formatted.")
    res = runner.invoke(app, ["storage", "format", "-c", str(config), "-t", "other", "-N", "-g"])
    assert res.exit_code == 1 and "Invalid cluster.id in:" in res.stderr


def test_cluster_id_checked(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="Invalid cluster id"):
        format_storage(FormatOptions(config=props(tmp_path), cluster_id="", standalone=True))


def test_random_uuid() -> None:
    outs = {runner.invoke(app, ["storage", "random-uuid"]).stdout.strip() for _ in range(3)}
    assert len(outs) == 3
    assert all(len(o) == 22 and not o.startswith("-") for o in outs)
    assert all(topic_id_from_str(o).int > 1 for o in outs)


@pytest.mark.skipif(not (KAFKA_LIBS.is_dir() and shutil.which("java")),
                    reason="Kafka 4.4's jars (~/.cache/strom-compat) or java missing")
def test_same_files_as_kafkas_tool(tmp_path: Path) -> None:
    """Kafka 4.4's kafka-storage format and Strom's, same flags: the same files, header
    records and feature levels (Kafka also writes eligible.leader.replicas.version, which
    Strom does not implement)."""
    flags = ["-I", f"1@localhost:19093:{DIR_1},2@localhost:19094:{DIR_2}", "-r", "4.2",
             "-f", "transaction.version=1", "-S", FIXED_SCRAM, "-S",
             "SCRAM-SHA-512=[name=bob,password=bob-secret]"]
    roots = {"kafka": tmp_path / "kafka", "strom": tmp_path / "strom"}
    for root in roots.values():
        root.mkdir()
    subprocess.run(["java", "-cp", f"{KAFKA_LIBS}/*", "kafka.tools.StorageTool", "format",
                    "-c", str(props(roots["kafka"])), "-t", CLUSTER, *flags],
                   check=True, capture_output=True, timeout=120)
    assert fmt(roots["strom"], *flags)[0] == 0

    def files(root: Path) -> list[str]:
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())

    assert files(roots["kafka"]) == files(roots["strom"])
    for d in ("d1", "d2", "meta"):
        k, s = meta(roots["kafka"] / d), meta(roots["strom"] / d)
        assert set(k) == set(s)
        assert {n: k[n] for n in ("version", "cluster.id", "node.id")} == \
            {n: s[n] for n in ("version", "cluster.id", "node.id")}
    assert meta(roots["kafka"] / "meta")["directory.id"] == \
        meta(roots["strom"] / "meta")["directory.id"] == DIR_1
    k_snap = load_snapshot(roots["kafka"] / "meta" / CHECKPOINT)
    s_snap = load_snapshot(roots["strom"] / "meta" / CHECKPOINT)
    assert (k_snap.snapshot_id, k_snap.kraft_version, k_snap.voters) == \
        (s_snap.snapshot_id, s_snap.kraft_version, s_snap.voters)
    k_features = features(roots["kafka"] / "meta" / CHECKPOINT)
    assert k_features.pop("eligible.leader.replicas.version") == 1
    assert k_features == features(roots["strom"] / "meta" / CHECKPOINT)
    # the SCRAM users: byte for byte where salt and salted password are given; the other
    # with a random salt of its own on each side
    k_scram = scram_values(roots["kafka"] / "meta" / CHECKPOINT)
    s_scram = scram_values(roots["strom"] / "meta" / CHECKPOINT)
    assert k_scram[0] == s_scram[0]
    k_bob, s_bob = (parse_user_scram_credential_record(v[1]) for v in (k_scram, s_scram))
    assert (k_bob.name, k_bob.mechanism, k_bob.credential.iterations) == \
        (s_bob.name, s_bob.mechanism, s_bob.credential.iterations) == \
        ("bob", "SCRAM-SHA-512", 4096)
