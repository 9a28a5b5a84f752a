"""``python -m bench``: run Strom, Tansu and Apache Kafka side by side, print the markdown report.

Options: --rounds N, --scenarios a,b,c, --quick, --peer tansu,kafka (the default: both; or one of
them; or strom, for an A/B of Strom against itself), --subject strom|tansu (tansu stands in for
Strom to check the harness itself), --list. The report is saved under bench/results/ with its
chart beside it (bench/chart.py: the same name, .svg).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from bench import chart, config, report
from bench.brokers import BrokerError, BrokerSpec, strom_spec, tansu_spec
from bench.kafka_peer import kafka_spec
from bench.peer import ensure_tansu
from bench.runner import CLIENT, Results, run
from bench.scenarios import ALL, BY_NAME, Scenario
from bench.scenarios.ceiling import Ceiling
from bench.scenarios.tls import ThroughputOverTls

REPO = Path(__file__).resolve().parent.parent
PEERS = ("tansu", "kafka", "strom")
DEFAULT_PEERS = ("tansu", "kafka")
RESULTS = Path(__file__).resolve().parent / "results"


def _log(msg: str) -> None:
    stamp = dt.datetime.now().strftime("%H:%M:%S")
    print(f"{stamp} {msg}", file=sys.stderr, flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, help="rounds of A/B runs (default 3, --quick 1)")
    ap.add_argument("--scenarios", help="comma-separated scenario names (see --list)")
    ap.add_argument("--quick", action="store_true", help="small sizes, 1 round: a ~2 min smoke run")
    ap.add_argument(
        "--subject",
        choices=("strom", "tansu"),
        default="strom",
        help="broker in the first slot; 'tansu' runs Tansu against itself to check the harness",
    )
    ap.add_argument(
        "--peer",
        "--peers",
        action="append",
        dest="peers",
        metavar="PEER[,PEER]",
        help="the brokers Strom is compared with, each run after it (repeatable or comma "
        f"separated; one of {', '.join(PEERS)}; default tansu,kafka); 'strom' alone compares "
        "Strom with Strom under --peer-override (e.g. metrics.listener= for the cost of metrics)",
    )
    ap.add_argument(
        "--peer-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="--override for the Strom peer (repeatable; with --peer strom)",
    )
    ap.add_argument("--strom-bin", help="Strom executable (default: .venv/bin/strom)")
    ap.add_argument("--strom-config", help="passed to Strom as --config FILE")
    ap.add_argument(
        "--peer-strom-bin",
        help="Strom executable of the Strom peer (with --peer strom), e.g. an older checkout's, "
        "for a before/after sitting of a change (default: the subject's)",
    )
    ap.add_argument(
        "--strom-override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra --override for Strom (repeatable)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="override one size from bench/config.py, e.g. --set huge_partitions=2000",
    )
    ap.add_argument("--out-dir", type=Path, default=RESULTS, help="where the report is saved")
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return ap.parse_args(argv)


def _select(names: str | None) -> list[Scenario]:
    if not names:
        return list(ALL)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise SystemExit(f"unknown scenario(s): {', '.join(unknown)}; try --list")
    chosen = [s for s in ALL if s.name in wanted]
    # The produce targets at 100 B are judged against the client's ceiling: measure it too.
    if any(s.name.startswith("produce-") for s in chosen) and not any(
        isinstance(s, Ceiling) for s in chosen
    ):
        chosen.insert(0, BY_NAME["client-ceiling"])
    return chosen


def _override(sizes: config.Sizes, items: list[str]) -> config.Sizes:
    changes: dict[str, float] = {}
    for item in items:
        key, _, value = item.partition("=")
        current = getattr(sizes, key, None)
        if current is None or not value:
            raise SystemExit(f"--set {item}: expected FIELD=N with FIELD one of {sizes.describe()}")
        changes[key] = type(current)(value)
    return dataclasses.replace(sizes, **changes)


def _strom_exe(given: str | None) -> str:
    if given:
        return given
    local = REPO / ".venv" / "bin" / "strom"
    return str(local) if local.exists() else (shutil.which("strom") or str(local))


def peer_names(given: list[str] | None) -> list[str]:
    """The --peer values as a list in run order: Tansu, then Kafka (the columns' order)."""
    names = [n.strip() for v in (given or [",".join(DEFAULT_PEERS)]) for n in v.split(",")]
    names = list(dict.fromkeys(n for n in names if n))
    unknown = [n for n in names if n not in PEERS]
    if unknown or not names:
        raise SystemExit(f"--peer {','.join(unknown)}: expected one or more of {', '.join(PEERS)}")
    if "strom" in names and len(names) > 1:
        raise SystemExit("--peer strom is an A/B of Strom against itself: give it alone")
    return sorted(names, key=PEERS.index)


def _brokers(args: argparse.Namespace) -> tuple[BrokerSpec, list[BrokerSpec]]:
    names = peer_names(args.peers)
    if names == ["strom"]:  # Strom against itself with other settings: an A/B of one change
        label = "Strom " + " ".join(args.peer_override) if args.peer_override else "Strom again"
        exe = _strom_exe(args.strom_bin)
        if args.peer_strom_bin:
            label = "Strom " + " ".join([Path(args.peer_strom_bin).parent.name, *args.peer_override])
        subject = strom_spec(exe, args.strom_config, args.strom_override)
        peer_exe = args.peer_strom_bin or exe
        return subject, [strom_spec(peer_exe, args.strom_config, args.peer_override, label=label)]
    peers: list[BrokerSpec] = []
    tansu: tuple[Path, str] | None = None
    if "tansu" in names or args.subject == "tansu":
        tansu = ensure_tansu(log=_log)
    if "tansu" in names and tansu is not None:
        peers.append(tansu_spec(str(tansu[0]), version=tansu[1]))
    if "kafka" in names:
        try:
            peers.append(kafka_spec(log=_log))
        except BrokerError as e:
            raise SystemExit(f"{e} (Kafka needs java 17+, and mvn for the first fetch)") from e
    if args.subject == "tansu" and tansu is not None:
        subject = tansu_spec(str(tansu[0]), label="Tansu-as-subject", version=tansu[1])
    else:
        subject = strom_spec(_strom_exe(args.strom_bin), args.strom_config, args.strom_override)
    return subject, peers


def _and(labels: list[str]) -> str:
    """'Tansu', 'Tansu and Kafka', 'A, B and C'."""
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def compose(
    scenarios: list[Scenario],
    results: Results,
    subject: BrokerSpec,
    peers: BrokerSpec | list[BrokerSpec],
    sizes: config.Sizes,
    rounds: int,
    started: dt.datetime,
    load: tuple[str, str],
    command: str,
) -> str:
    """The whole markdown document: context, client ceiling, main table, verdict."""
    others = [peers] if isinstance(peers, BrokerSpec) else peers
    labels = [p.label for p in others]
    vs = _and(labels)
    peer_text = " and ".join(f"**{p.label}** {p.version} ({p.notes})" for p in others)
    ceiling_runs = results.runs.get("client-ceiling", {}).get(CLIENT, [])
    refs: dict[str, float] = {}
    out = [
        f"# {subject.label} vs. {vs} - {started:%Y-%m-%d %H:%M}",
        "",
        f"- Brokers: **{subject.label}** ({subject.notes}; `"
        + " ".join(subject.command(0, Path("DATA"))).replace("127.0.0.1:0", "127.0.0.1:PORT")
        + f"`{_commit() if subject.kind == 'strom' else ''}) vs. {peer_text}.",
        f"- Rounds: {rounds}, alternating {' / '.join([subject.label, *labels])} per scenario, "
        "fresh broker and storage for every run. Cells: median (min-max).",
        f"- Client: confluent-kafka {_ck_version()}; producer {config.PRODUCER_THROUGHPUT['linger.ms']} ms "
        "linger, 1 MiB batches (latency run: linger 0); consumer "
        + ", ".join(f"{k}={v}" for k, v in config.CONSUMER.items() if "commit" not in k)
        + "; every client runs in its own process.",
        *_tls_note(scenarios),
        f"- Machine: {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}, load average {load[0]} at start, {load[1]} at end; "
        f"run took {results.seconds / 60:.1f} min.",
        f"- Command: `{command}`.",
        "- MB = 10^6 bytes of record values. Broker CPU = on-CPU seconds of the broker's process "
        "tree (/proc stat and schedstat, see docs/benchmarks.md); RSS = peak VmHWM.",
        "",
    ]
    if ceiling_runs:
        ceiling = BY_NAME["client-ceiling"].rows(sizes)
        for m in ceiling.metrics:
            c = report.cell(ceiling_runs, m)
            if c.stat is not None:
                refs[m.key] = c.stat.median
        out += ["## Client ceiling (produce() into the local queue, no broker)", ""]
        out += [
            "| Records | records/s | MB/s | records/s, delivery reports served too |",
            "|---|---|---|---|",
        ]
        ms = ceiling.metrics
        for rps, mbs, reported in zip(ms[::3], ms[1::3], ms[2::3], strict=True):
            out.append(
                f"| {rps.label} | {report.cell(ceiling_runs, rps).text} | "
                f"{report.cell(ceiling_runs, mbs).text} | "
                f"{report.cell(ceiling_runs, reported).text} |"
            )
        out.append("")
    table_scenarios = _table(scenarios, sizes)
    rows = report.build_rows(table_scenarios, results.runs, subject.label, labels, refs)
    out += [f"## {subject.label} vs. {vs}", ""]
    out += [report.markdown_table(rows, subject.label, labels), ""]
    if any(t.kind.startswith("ratio") for s in table_scenarios for m in s.metrics for t in m.targets):
        out += ["A target that compares with a peer names it; one whose peer did not run is left out.", ""]
    out += [report.verdict_summary(rows), ""]
    return "\n".join(out)


def _tls_note(scenarios: list[Scenario]) -> list[str]:
    """The report's line on the runs over SSL, if any ran: how the listeners were set up."""
    names = [s.name for s in scenarios if isinstance(s, ThroughputOverTls)]
    if not names:
        return []
    return [
        f"- Over SSL ({', '.join(names)}): the clients' listener is SSL, with a CA and an EC "
        "P-256 certificate for 127.0.0.1 made for this sitting (bench/tls.py) and read as a "
        "PEM key store (`ssl.keystore.type=PEM`, `ssl.keystore.location`); Strom listens on SSL "
        "alone, Kafka keeps its PLAINTEXT inter-broker listener on another port; the clients "
        "add `security.protocol=SSL` and `ssl.ca.location`."
    ]


def _table(scenarios: list[Scenario], sizes: config.Sizes) -> list[report.ScenarioRows]:
    """The scenarios of the main table (the client ceiling has its own)."""
    return [s.rows(sizes) for s in scenarios if s.needs_broker]


def _chart(
    path: Path,
    text: str,
    scenarios: list[Scenario],
    sizes: config.Sizes,
    results: Results,
    subject: BrokerSpec,
    peers: list[BrokerSpec],
) -> None:
    """The report's chart beside it; a missing matplotlib costs the picture, not the run."""
    data = chart.from_results(
        _table(scenarios, sizes),
        results.runs,
        subject.label,
        [p.label for p in peers],
        chart.title_from_report(text),
    )
    try:
        chart.draw(data, path)
    except ImportError as e:
        _log(f"no chart: {e} (pip install matplotlib, or make bench, which installs it)")
        return
    _log(f"chart saved to {path}")


def _commit() -> str:
    """The checkout's commit, so a saved report says which Strom it measured."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return f", commit {out.stdout.strip()}" if out.returncode == 0 else ""


def _ck_version() -> str:
    try:
        import confluent_kafka

        return f"{confluent_kafka.__version__} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        return "?"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _interrupt(signum: int, _frame: object) -> None:
    """SIGTERM as Ctrl-C: the running scenario's ``finally`` stops the brokers it started."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    command = shlex.join(["python", "-m", "bench", *(sys.argv[1:] if argv is None else argv)])
    if args.list:
        for s in ALL:
            print(s.name)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)  # a stopped sitting stops its brokers too
    sizes = _override(config.QUICK if args.quick else config.FULL, args.set)
    rounds = args.rounds or sizes.rounds
    scenarios = _select(args.scenarios)
    subject, peers = _brokers(args)
    started = dt.datetime.now()
    load_start = _loadavg()
    vs = _and([p.label for p in peers])
    _log(f"{len(scenarios)} scenarios x {rounds} round(s): {subject.label} vs. {vs}")
    results = run(scenarios, subject, peers, sizes, rounds, _log)
    text = compose(
        scenarios,
        results,
        subject,
        peers,
        sizes,
        rounds,
        started,
        (load_start, _loadavg()),
        command,
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    path = args.out_dir / f"{started:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.md"
    path.write_text(text)
    print(text)
    _log(f"report saved to {path}")
    _chart(path.with_suffix(".svg"), text, scenarios, sizes, results, subject, peers)
    return 0
