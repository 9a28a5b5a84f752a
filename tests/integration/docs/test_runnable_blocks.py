"""The documentation cannot drift from the code: every shell command the README and the pages of
docs/ show is run by this test, or excluded on purpose with a reason the page shows.

Fenced blocks, by their info string:

- ```` ```bash runnable ````: run. A page's runnable blocks are joined in order into one
  ``bash -euo pipefail`` script, run in a fresh directory against a fresh broker, and must exit 0.
  ``localhost:9092`` is that broker's address (also ``$STROM_BOOTSTRAP_SERVER``) and
  ``localhost:9404`` its metrics endpoint; ``PATH`` starts
  with this venv's ``bin`` (``strom``, ``python``). Every other port a page names as
  ``localhost:N`` or ``127.0.0.1:N`` (its own brokers, ZooKeeper, a closed port) is replaced by a
  free port, wherever ``N`` follows a ``:`` or ``=`` in the script, so pages never collide with
  whatever else runs on the machine. What the script leaves running in the background (a broker
  it started with ``&``) is stopped with its process group.
- ```` ```bash not-runnable: <reason> ````: shown, not run, for commands that cannot be run
  here (they run until Ctrl-C, or for many minutes, or change the environment); the reason is
  required. docs/kafka-tools.md's catalogue of Kafka tool command shapes (``$B``, ``[--opt]``) is
  such a block too; ``test_the_kafka_tools_catalogue_is_what_the_tools_tests_run`` checks each
  line against the calls of tests/integration/kafka_tools, which run them.
- ```` ```text output ````: what the ```` ```bash runnable ```` block before it prints, stdout
  and stderr together, checked against what it printed in this run (the script runs with
  stderr on stdout and prints a marker line before each block, which tells the blocks' outputs
  apart; stdout and stderr come in the order the commands write and flush them). Prose may
  stand between the two blocks, another fenced block may not (an output block anywhere else
  fails ``test_every_shell_block_is_run_or_excluded``), so a runnable block has at most one
  output block: to show outputs apart, split the commands into blocks. Both sides are
  normalised by the named patterns of ``NORMALISE`` (UUIDs, Kafka's 22-character topic ids,
  ISO-8601 times, epoch milliseconds, ports of loopback addresses, durations in ``ms``, paths
  under the temp directory) and lose trailing whitespace and trailing blank lines. In the
  expected block a line ``...`` stands for any number of lines (none too), and ``…`` (U+2026)
  inside a line for any text within that line. A mismatch fails the page's test with a
  unified diff of the two normalised texts, naming both blocks by page and line, and the
  output as printed (to paste into the page: the real output wins, unless it is a bug).
- Any other ``bash``/``sh``/``shell``/``console``/``zsh`` block, or a block without a language,
  fails ``test_every_shell_block_is_run_or_excluded``. Synopses, diagrams and output of commands
  that are not run are ```` ```text ```` (or ``mermaid``, ``python``, ``properties``, ...), which
  are neither run nor checked.

A page that needs more than a broker says so in an HTML comment, ``<!-- runnable-setup: NAME,
... -->``, from ``SETUPS`` below: ``checkout`` (the run directory holds links to the top-level
entries of this checkout, so ``compat/...`` and ``python -m bench`` resolve; files the page writes
stay in the run directory), ``zookeeper`` (Debian's ZooKeeper jar, which the page starts itself),
``kafka-tools`` (Kafka 4.4's jars in ``~/.cache/strom-compat``, fetched once as the Kafka tools
tests do), ``spark`` (PySpark and Java; its JVMs get ``JAVA_TOOL_OPTIONS`` for C1-only compiling
and the serial GC, which only shorten these short runs), ``schema-registry`` (the page's broker
serves the schema registry: ``localhost:8081`` is its address, also
``$STROM_SCHEMA_REGISTRY_URL``), ``http-api`` (the page's broker serves the HTTP API and the
schema registry: ``localhost:8082`` is the HTTP API's address, also ``$STROM_REST_URL``). A
missing prerequisite fails the page, saying what to install, as the tests that use it do. A
setup that needs the page's broker configured its way names the settings in
``BROKER_SETTINGS``: the broker starts with them, and the setup gets the started broker.

A command expected to fail is written so that success fails the script: ``exits N COMMAND``
with the one-line function the page defines where it uses it, or ``if COMMAND; then exit 1; fi``
(``cmd || test $? = N`` would pass when ``cmd`` succeeds).
"""

from __future__ import annotations

import ast
import difflib
import importlib.util
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..broker import BrokerProcess, free_port
from ..kafka_tools import jars
from ..kafka_tools.tools import MAIN_CLASSES

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = {"bash", "sh", "shell", "console", "zsh"}
RUNNABLE = "bash runnable"
OUTPUT = "text output"
ANY_LINES = "..."  # a line of an output block that stands for any number of lines
ANY_TEXT = "\u2026"  # "…" in a line of an output block: any text within the line
_FENCE = re.compile(r"^([ \t]*)(`{3,})[ \t]*(.*)$")
_SETUP = re.compile(r"<!--\s*runnable-setup:\s*(.*?)\s*-->")
_PAGE_PORT = re.compile(r"\b(?:localhost|127\.0\.0\.1):(\d{4,5})\b")
SCRIPT_TIMEOUT = 150.0
CATALOGUE = "not-runnable: a catalogue of command shapes; tests/integration/kafka_tools runs each line"
TOOLS_TESTS = ROOT / "tests" / "integration" / "kafka_tools"
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")

pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    info: str  # the fence's info string
    body: str

    @property
    def language(self) -> str:
        return self.info.split(maxsplit=1)[0] if self.info else ""


def blocks(page: str, text: str) -> list[Block]:
    """The fenced blocks of a Markdown text (indented ones too, dedented by their fence)."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[i + 1:end]]
        found.append(Block(page, i + 1, info.strip(), "\n".join(body) + "\n"))
        i = end + 1
    return found


def problems(blocks_: list[Block]) -> list[str]:
    """Blocks that are shell commands neither run nor excluded with a reason, and output blocks
    that do not follow a runnable block."""
    out = []
    for before, b in zip([None, *blocks_], blocks_, strict=False):
        where = f"{b.page}:{b.line}"
        if b.language == "text" and b.info not in ("text", OUTPUT):
            out.append(f"{where}: ```{b.info}: a text block is `text` or `{OUTPUT}`")
        elif b.info == OUTPUT and (before is None or before.info != RUNNABLE):
            out.append(f"{where}: a `{OUTPUT}` block must come right after the `{RUNNABLE}` "
                       "block whose output it is (prose may stand between them, no other block)")
        elif not b.info:
            out.append(f"{where}: a block without a language; mark commands `bash runnable` (or "
                       "`bash not-runnable: <reason>`), output and synopses `text`")
        elif b.language in SHELLS:
            rest = b.info[len(b.language):].strip()
            if b.info == RUNNABLE:
                continue
            if re.fullmatch(r"not-runnable:\s*\S.*", rest):
                continue
            out.append(f"{where}: ```{b.info} is neither `bash runnable` nor "
                       "`<shell> not-runnable: <reason>`")
    return out


def _page_name(doc: Path) -> str:
    return doc.relative_to(ROOT).as_posix()


def _setups(text: str) -> list[str]:
    return [s.strip() for m in _SETUP.findall(text) for s in m.split(",") if s.strip()]


@dataclass(frozen=True)
class Step:
    """A runnable block and the output block after it, if the page shows its output."""

    run: Block
    output: Block | None


@dataclass(frozen=True)
class Page:
    name: str
    steps: tuple[Step, ...]
    setups: tuple[str, ...]

    @property
    def script(self) -> str:
        return "\n".join(s.run.body for s in self.steps)


def steps(blocks_: list[Block]) -> list[Step]:
    """The runnable blocks of a page, each with the `text output` block right after it."""
    found = []
    for b, after in zip(blocks_, [*blocks_[1:], None], strict=False):
        if b.info == RUNNABLE:
            found.append(Step(b, after if after is not None and after.info == OUTPUT else None))
    return found


def _pages() -> list[Page]:
    """Each page that has runnable blocks."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        page_steps = steps(blocks(_page_name(doc), text))
        if page_steps:
            found.append(Page(_page_name(doc), tuple(page_steps), tuple(_setups(text))))
    return found


PAGES = _pages()


# --------------------------------------------------------------------------- output blocks

# Applied in this order to both the expected and the actual output: what differs from run to run.
NORMALISE: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("uuid", re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
     "<uuid>"),
    ("topic id", re.compile(r"(?<![\w-])[A-Za-z0-9_-]{22}(?![\w-])"), "<topic-id>"),
    ("ISO time", re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d+)?)?"
                            r"(?:Z|[+-]\d\d:?\d\d)?"), "<time>"),
    ("epoch ms", re.compile(r"(?<!\d)1\d{12}(?!\d)"), "<epoch-ms>"),
    ("loopback port", re.compile(r"\b(?:localhost|127\.0\.0\.1):\d{1,5}\b"), "localhost:<port>"),
    ("ms duration", re.compile(r"(?<![\w.])\d+(?:\.\d+)?ms\b"), "<n>ms"),
    ("temp path", re.compile(rf"{re.escape(tempfile.gettempdir())}/[^\s'\":]*"), "<tmp>"),
)


def normalise(text: str) -> list[str]:
    """``text``'s lines with ``NORMALISE`` applied, trailing whitespace and blank lines gone."""
    for _, pattern, replacement in NORMALISE:
        text = pattern.sub(replacement, text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_matches(expected: str, actual: str) -> bool:
    if ANY_TEXT not in expected:
        return expected == actual
    pattern = ".*".join(re.escape(part) for part in expected.split(ANY_TEXT))
    return re.fullmatch(pattern, actual) is not None


def output_matches(expected: list[str], actual: list[str]) -> bool:
    """Whether normalised ``actual`` lines match the ``expected`` ones, wildcards included."""
    # reachable[j]: expected[:i] can match actual[:j]; one row per expected line
    reachable = [True] + [False] * len(actual)
    for want in expected:
        if want == ANY_LINES:
            for j in range(1, len(reachable)):
                reachable[j] = reachable[j] or reachable[j - 1]
        else:
            reachable = [False] + [reachable[j] and _line_matches(want, actual[j])
                                   for j in range(len(actual))]
    return reachable[-1]


def marked_script(page: Page, marker: str) -> str:
    """The page's script, printing a line ``MARKER N`` before block ``N`` runs."""
    parts = []
    for i, step in enumerate(page.steps):
        parts += [f"printf '\\n%s\\n' '{marker} {i}'", step.run.body]
    return "\n".join(parts)


def split_output(out: str, marker: str) -> dict[int, str]:
    """Block number -> what it printed, from the output of ``marked_script``."""
    pieces = re.split(rf"\n?{re.escape(marker)} (\d+)\n", out)
    return {int(n): text for n, text in zip(pieces[1::2], pieces[2::2], strict=True)}


def output_mismatch(step: Step, printed: str) -> str | None:
    """A unified diff when the block's output block does not match what it printed, and what
    it printed as it printed it (to paste into the page, ports put back)."""
    assert step.output is not None
    expected, actual = normalise(step.output.body), normalise(printed)
    if output_matches(expected, actual):
        return None
    wildcards = [line for line in expected if ANY_TEXT in line]
    shown = [next((w for w in wildcards if _line_matches(w, line)), line) for line in actual]
    diff = difflib.unified_diff(  # lines a wildcard line matches are shown as that line
        expected, shown, lineterm="",
        fromfile=f"{step.output.page}:{step.output.line} (expected, normalised)",
        tofile=f"what the block at {step.run.page}:{step.run.line} printed (normalised)")
    return "\n".join(diff)[:6000] + f"\nas printed:\n{printed[:3000]}"


# --------------------------------------------------------------------------- what pages need


def _checkout(run_dir: Path, broker: BrokerProcess) -> dict[str, str]:
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".venv") and not (run_dir / entry.name).exists():
            (run_dir / entry.name).symlink_to(entry)
    return {}


def _zookeeper(run_dir: Path, broker: BrokerProcess) -> dict[str, str]:
    if not Path("/usr/share/java/zookeeper.jar").exists():
        pytest.fail("/usr/share/java/zookeeper.jar is missing: install Debian's zookeeper "
                    "package (make system-deps)")
    if shutil.which("java") is None:
        pytest.fail("java is not installed")
    return {}


def _kafka_tools(run_dir: Path, broker: BrokerProcess) -> dict[str, str]:
    missing = [t for t in (("java",) if jars.is_cached() else ("java", "mvn"))
               if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not installed (Java 17+ and Maven run Kafka's tools)")
    jars.ensure_libs()
    return {}


def _spark(run_dir: Path, broker: BrokerProcess) -> dict[str, str]:
    if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        pytest.fail("PySpark and Java are needed (pip install 'strom[spark]')")
    return {"JAVA_TOOL_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}


REGISTRY = "localhost:8081"  # the schema registry's address on a page (Confluent's port)
REGISTRY_ENV = "STROM_SCHEMA_REGISTRY_URL"  # `strom schemas --registry-url`'s default


def _schema_registry(run_dir: Path, broker: BrokerProcess) -> dict[str, str]:
    """The page's broker serves the registry (on a port the OS chose, printed at start-up)."""
    from ..registry.test_registry_api import registry_url, wait_ready

    url = registry_url(broker)
    wait_ready(url)
    return {REGISTRY_ENV: url}


REST = "localhost:8082"  # the HTTP API's address on a page (Confluent REST Proxy's port)
REST_ENV = "STROM_REST_URL"


def _http_api(run_dir: Path, broker: BrokerProcess) -> dict[str, str]:
    """The page's broker serves the HTTP API (and the registry its schema formats use)."""
    from ..rest.conftest import Rest, started_url, wait_answers

    rest = Rest(started_url(broker, "HTTP API"), broker, started_url(broker, "schema registry"))
    wait_answers(rest)
    return {REST_ENV: rest.url, **_schema_registry(run_dir, broker)}


SETUPS = {"checkout": _checkout, "zookeeper": _zookeeper, "kafka-tools": _kafka_tools,
          "spark": _spark, "schema-registry": _schema_registry, "http-api": _http_api}

# What the page's broker starts with for a setup that needs it configured its way.
BROKER_SETTINGS: dict[str, dict[str, object]] = {
    "schema-registry": {"schema.registry.listeners": "http://127.0.0.1:0"},
    "http-api": {"schema.registry.listeners": "http://127.0.0.1:0",
                 "rest.listeners": "http://127.0.0.1:0"}}


def localize(script: str, bootstrap: str, metrics: str = "127.0.0.1:9404",
             registry: str | None = None, rest: str | None = None) -> str:
    """localhost:9092 becomes ``bootstrap``, localhost:9404 ``metrics`` (the test broker's
    endpoint) and, when the broker serves them, localhost:8081 ``registry`` (its schema
    registry's host:port) and localhost:8082 ``rest`` (its HTTP API's); every other port the
    page names a free port."""
    script = script.replace("localhost:9092", bootstrap).replace("localhost:9404", metrics)
    taken = {bootstrap.rsplit(":", 1)[1], metrics.rsplit(":", 1)[1]}
    for page_address, address in ((REGISTRY, registry), (REST, rest)):
        if address is not None:
            script = script.replace(page_address, address)
            taken.add(address.rsplit(":", 1)[1])
    for port in sorted({p for p in _PAGE_PORT.findall(script) if p not in taken}):
        script = re.sub(rf"(?<=[:=]){port}\b", str(free_port()), script)
    return script


# --------------------------------------------------------------------------- the tests


def test_every_shell_block_is_run_or_excluded() -> None:
    found = []
    for doc in DOCS:
        text = doc.read_text()
        found += problems(blocks(_page_name(doc), text))
        found += [f"{_page_name(doc)}: unknown runnable-setup {s!r} (known: {sorted(SETUPS)})"
                  for s in _setups(text) if s not in SETUPS]
    assert not found, "\n".join(found)


def test_the_pages_with_commands_run_them() -> None:
    """A guard on the parsing itself: these pages have runnable blocks."""
    assert {page.name for page in PAGES} >= {
        "README.md", "docs/benchmarks.md", "docs/cli.md", "docs/clusters.md",
        "docs/consumer-groups.md", "docs/kafka-tools.md", "docs/security.md", "docs/spark.md",
        "docs/transactions.md"}


def test_the_checker_finds_unmarked_commands() -> None:
    page = ("```\nstrom topics list\n```\n"
            "```bash\nstrom topics list\n```\n"
            "```console\n$ strom topics list\n```\n"
            "```bash not-runnable:\nmake run\n```\n"
            "```bash runnable\nstrom topics list\n```\n"
            "```bash not-runnable: runs until Ctrl-C\nmake run\n```\n"
            "```text\nclicks\n```\n"
            "- a list\n\n  ```sh\n  strom topics list\n  ```\n")
    found = problems(blocks("page.md", page))
    assert [p.split(":")[1] for p in found] == ["1", "4", "7", "10", "24"], found


def test_an_output_block_belongs_to_the_runnable_block_right_before_it() -> None:
    page = ("```text output\nstray\n```\n"
            "```bash runnable\necho a\n```\n"
            "Prose between them.\n"
            "```text output\na\n```\n"
            "```text output\na second one\n```\n"
            "```text\nstrom topics list [--exclude-internal]\n```\n"
            "```text output\nafter a synopsis\n```\n"
            "```bash runnable\necho b\n```\n"
            "```text outptu\nb\n```\n")
    found = blocks("page.md", page)
    assert [p.split(":")[1] for p in problems(found)] == ["1", "11", "17", "23"], problems(found)
    assert [(s.run.line, s.output and s.output.line) for s in steps(found)] == [(4, 8), (20, None)]


def test_output_is_normalised() -> None:
    tmp = tempfile.gettempdir()
    text = ("Topic: t\tTopicId: cUhTR_rlRT66pUjFgxxMeA PartitionCount: 3   \n"
            "orders-app  app-1-5c94faac-ea56-4b49-8f4e-857fb075ada7  /127.0.0.1\n"
            "0  orders-etl-0  60000  2026-11-27T12:29:57.859+00:00  2865  orders-1\n"
            "position: 0 CreateTime: 1700000000005 size: 134 __consumer_offsets\n"
            "broker at localhost:45123: Connect to ipv4#127.0.0.1:9999 failed (after 0ms in state)\n"
            f"retention.ms=86400000 segment.ms 10 {tmp}/pytest-of-me/run0/data: gone\n\n\n")
    assert normalise(text) == [
        "Topic: t\tTopicId: <topic-id> PartitionCount: 3",
        "orders-app  app-1-<uuid>  /127.0.0.1",
        "0  orders-etl-0  60000  <time>  2865  orders-1",
        "position: 0 CreateTime: <epoch-ms> size: 134 __consumer_offsets",
        "broker at localhost:<port>: Connect to ipv4#localhost:<port> failed (after <n>ms in state)",
        "retention.ms=86400000 segment.ms 10 <tmp>: gone"]


@pytest.mark.parametrize(("expected", "actual", "matches"), [
    ([], [], True),
    (["a", "b"], ["a", "b"], True),
    (["a"], ["a", "b"], False),
    (["a", "b"], ["a"], False),
    (["a", "...", "d"], ["a", "b", "c", "d"], True),
    (["a", "...", "d"], ["a", "d"], True),
    (["a", "...", "d"], ["a", "b", "c"], False),
    (["...", "c"], ["c", "b", "c"], True),
    (["..."], [], True),
    (["...", "x"], [], False),
    (["took … s"], ["took 2.5 s"], True),
    (["took … s"], ["took 2.5 ms"], False),
    (["… orders-1"], ["0  Ongoing  2865  orders-1"], True),
    (["a.b"], ["axb"], False),  # the rest of a line is text, not a pattern
])
def test_output_wildcards(expected: list[str], actual: list[str], matches: bool) -> None:
    assert output_matches(expected, actual) is matches


def test_each_block_output_is_told_apart() -> None:
    """Output without a final newline, stderr, and a block that prints nothing."""
    run = [Block("p.md", n, RUNNABLE, body) for n, body in
           ((1, "printf 'no newline'\n"), (5, "echo one; echo two >&2\n"), (9, "true\n"))]
    page = Page("p.md", tuple(Step(b, None) for b in run), ())
    marker = "@@docs-block-test@@"
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", marked_script(page, marker)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         check=True).stdout
    assert split_output(out, marker) == {0: "no newline", 1: "one\ntwo\n", 2: ""}


def test_a_mismatch_shows_a_diff_naming_both_blocks() -> None:
    step = Step(Block("p.md", 3, RUNNABLE, "echo a\n"), Block("p.md", 7, OUTPUT, "took … s\nb\n"))
    diff = output_mismatch(step, "took 2 s\na\n")
    assert diff is not None and "p.md:7" in diff and "p.md:3" in diff, diff
    assert "\n took … s\n-b\n+a\n" in diff, diff  # the line the wildcard matches is no change
    assert output_mismatch(step, "took 3 s\nb  \n\n") is None


def test_ports_are_replaced() -> None:
    script = ("strom topics list -b localhost:9092\n"
              "strom broker --override listeners=PLAINTEXT://127.0.0.1:9093 clientPort=2181\n"
              "strom broker --override zookeeper.connect=127.0.0.1:2181/strom --partitions 9093\n"
              "strom topics list -b localhost:9093\n")
    out = localize(script, "127.0.0.1:40000").splitlines()
    m = re.fullmatch(r".*127\.0\.0\.1:(\d+) clientPort=(\d+)", out[1])
    assert m and len({"9093", "2181", *m.groups()}) == 4, out
    b, zk = m.groups()
    assert out[0] == "strom topics list -b 127.0.0.1:40000"
    assert out[2].endswith(f"127.0.0.1:{zk}/strom --partitions 9093")  # a count, not a port
    assert out[3] == f"strom topics list -b localhost:{b}"


def test_the_schema_registry_is_the_brokers() -> None:
    """localhost:8081 is the registry of the page's broker when it serves one (the
    schema-registry setup), else a port like any other the page names."""
    script = "strom schemas list --registry-url http://localhost:8081\n"
    assert localize(script, "127.0.0.1:40000", registry="127.0.0.1:40001") == \
        "strom schemas list --registry-url http://127.0.0.1:40001\n"
    elsewhere = localize(script, "127.0.0.1:40000")
    assert re.fullmatch(r"strom schemas list --registry-url http://localhost:(\d+)\n",
                        elsewhere) and ":8081" not in elsewhere, elsewhere


def test_brokers_the_pages_start_have_their_own_metrics_port() -> None:
    """A broker a page starts must set ``metrics.listener`` (a port ``localize`` replaces):
    on the default, 127.0.0.1:9404, it would fail to start whenever another broker on the
    machine has that port (another test session; seen once as docs/security.md's 30 s wait
    for its broker running out)."""
    missing = [page.name for page in PAGES
               if re.search(r"^\s*strom broker\b", page.script, flags=re.M)
               and "metrics.listener=http://127.0.0.1:" not in page.script]
    assert not missing, f"pages that start a broker on the default metrics port: {missing}"


def _literal_options(node: ast.AST) -> set[str]:
    return {c.value for c in ast.walk(node)
            if isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith("--")}


def _named_options(tree: ast.Module) -> dict[str, set[str]]:
    """name -> the options of the literals assigned to it anywhere in a module (``PRINT = [...]``,
    ``for scope in (["--broker-id", "0"], ["--topic", topic])``): an over-approximation."""
    named: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        pairs = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, ast.For):
            pairs = [(node.target, node.iter)]
        for target, value in pairs:
            if isinstance(target, ast.Name):
                named.setdefault(target.id, set()).update(_literal_options(value))
    return named


def _tool_calls() -> dict[str, list[set[str]]]:
    """tool -> the option sets of each call of it in the Kafka tools tests: the string literals
    starting with ``--`` among a call's arguments (``run("kafka-topics", "--list", ...)``), also
    through names bound to literals. A helper that passes its ``*args`` on (``def get(*args):
    return run("kafka-get-offsets", "--bootstrap-server", bs, *args)``) counts with the options
    of each call of it."""
    calls: dict[str, list[set[str]]] = {}
    for path in sorted(TOOLS_TESTS.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        named = _named_options(tree)

        def options(args: list[ast.expr], named=named) -> set[str]:
            found = set()
            for arg in args:
                found |= _literal_options(arg)
                for n in ast.walk(arg):
                    if isinstance(n, ast.Name):
                        found |= named.get(n.id, set())
            return found

        helpers: dict[str, tuple[str, set[str]]] = {}
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(func):
                if (isinstance(node, ast.Call) and node.args
                        and isinstance(node.args[0], ast.Constant)
                        and node.args[0].value in MAIN_CLASSES):
                    calls.setdefault(node.args[0].value, []).append(options(node.args[1:]))
                    if func.args.vararg and any(
                            isinstance(a, ast.Starred) and isinstance(a.value, ast.Name)
                            and a.value.id == func.args.vararg.arg for a in node.args):
                        helpers[func.name] = (node.args[0].value, options(node.args[1:]))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in helpers):
                tool, fixed = helpers[node.func.id]
                calls[tool].append(fixed | options(node.args))
    return calls


def catalogue_lines(body: str) -> list[str]:
    """The command lines of a catalogue block: continuations joined, comments dropped."""
    lines = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def test_the_kafka_tools_catalogue_is_what_the_tools_tests_run() -> None:
    """docs/kafka-tools.md lists command shapes instead of running them (a JVM each, and the
    tools tests already run and check every one): each line's tool must be run by some call of
    tests/integration/kafka_tools with every option the line names."""
    page = ROOT / "docs" / "kafka-tools.md"
    catalogue = [b for b in blocks("docs/kafka-tools.md", page.read_text())
                 if b.info == f"bash {CATALOGUE}"]
    calls = _tool_calls()
    checked, missing = 0, []
    for block in catalogue:
        for line in catalogue_lines(block.body):
            tool = line.split()[0]
            optional = [set(_OPTION.findall(g)) for g in re.findall(r"\[([^\]]*)\]", line)]
            required = set(_OPTION.findall(re.sub(r"\[[^\]]*\]", "", line)))
            checked += 1
            for wanted in [required | g for g in optional if g] or [required]:
                if not any(wanted <= call for call in calls.get(tool, [])):
                    missing.append(f"{line}\n    (no call of {tool} with {sorted(wanted)})")
    assert len(catalogue) >= 9 and checked >= 50, (len(catalogue), checked)
    assert not missing, "lines no tools test runs:\n" + "\n".join(missing)


def _params() -> list:
    """One per page; a page that would fetch Kafka's jars first gets Maven's time too (as the
    first Kafka tools test does: this package runs before that one)."""
    params = []
    for page in PAGES:
        marks = ([pytest.mark.timeout(jars.FETCH_TIMEOUT + 180)]
                 if "kafka-tools" in page.setups and not jars.is_cached() else [])
        params.append(pytest.param(page, id=page.name, marks=marks))
    return params


@pytest.mark.parametrize("page", _params())
def test_runnable_blocks(page: Page, make_broker, tmp_path) -> None:
    broker = make_broker({k: v for name in page.setups
                          for k, v in BROKER_SETTINGS.get(name, {}).items()})
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "STROM_BOOTSTRAP_SERVER": broker.bootstrap}
    env.pop(REGISTRY_ENV, None)  # only a page with the schema-registry setup has one
    env.pop(REST_ENV, None)
    for name in page.setups:
        env.update(SETUPS[name](tmp_path, broker))
    marker = f"@@docs-block-{secrets.token_hex(8)}@@"
    registry = env[REGISTRY_ENV].removeprefix("http://") if REGISTRY_ENV in env else None
    rest = env[REST_ENV].removeprefix("http://") if REST_ENV in env else None
    script = localize(marked_script(page, marker), broker.bootstrap,
                      broker.metrics_url.removeprefix("http://").removesuffix("/metrics"),
                      registry, rest)
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, stopped below
    try:
        out, _ = proc.communicate(timeout=SCRIPT_TIMEOUT)
    finally:
        _stop_group(proc.pid)
    printed = split_output(out, marker)
    failed = [] if proc.returncode == 0 else [max(printed, default=0)]
    found = [f"{page.name}: exit code {proc.returncode} in the block at {page.name}:"
             f"{page.steps[n].run.line}, which printed:\n{printed.get(n, out)[-3000:]}"
             for n in failed]
    found += [d for i, step in enumerate(page.steps)  # the blocks that ran to their end
              if step.output is not None and i in printed and i not in failed
              and (d := output_mismatch(step, printed[i])) is not None]
    assert not found, "\n\n".join(found)


def _stop_group(pgid: int) -> None:
    """Stop what the script left running (a broker it started in the background)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)  # waiting for the group to exit, with a deadline
