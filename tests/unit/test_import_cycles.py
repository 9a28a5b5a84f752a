"""No import cycles between the modules of a package.

A cycle makes the import order matter and hides dependencies behind deferred imports, so every
import counts here, wherever it is written: at the top, inside a function, or under
`TYPE_CHECKING`. The graph is read from the source with `ast` (nothing is imported), so a
package can be added to PACKAGES as soon as it is clean.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PACKAGES = ["strom"]  # every package of Strom, so strom.broker and strom.cluster too


def _modules(package: str) -> dict[str, Path]:
    """Every module of the package (and its subpackages), by dotted name."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is not a package"
    root = Path(next(iter(spec.submodule_search_locations)))
    out: dict[str, Path] = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join([package, *parts])] = path
    return out


def _imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports (a `from pkg import mod` names the module)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                       for alias in node.names]
        else:
            continue
        out.update(t for t in targets if t in known and t != name)
    # Importing a.b.c first runs a/__init__ and a/b/__init__: those count too, except the
    # importer's own packages (already being imported when it runs).
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    for target in list(out):
        parts = target.split(".")
        out.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
                   if p in known and p not in own and p != name)
    return out


def import_graph(package: str) -> dict[str, set[str]]:
    known = _modules(package)
    return {name: _imported(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_are_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    graph = import_graph(package)
    assert len(graph) > 1
    assert cycles(graph) == []


def _reachable(graph: dict[str, set[str]], roots: list[str]) -> set[str]:
    """Every module that importing `roots` imports, directly or not."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def _under(modules: set[str], *packages: str) -> set[str]:
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)}


def test_layers_point_downward() -> None:
    """The record format imports no other Strom package; storage (and so the record format)
    never reaches the broker, the coordinators or the cluster, and of the protocol layer it
    uses only the error codes."""
    graph = import_graph("strom")
    record = _under(set(graph), "strom.record")
    storage = _under(set(graph), "strom.storage")
    assert record and storage
    assert _reachable(graph, sorted(record)) - record - {"strom"} == set()
    below = _reachable(graph, sorted(storage | record))
    assert _under(below, "strom.broker", "strom.coordinator", "strom.cluster") == set()
    assert _under(below, "strom.protocol") <= {"strom.protocol", "strom.protocol.errors"}


def test_nothing_below_the_cli_imports_the_console() -> None:
    """The web console is a client: the broker and its layers never reach it."""
    graph = import_graph("strom")
    console = _under(set(graph), "strom.console")
    assert console
    server_side = _under(set(graph), "strom.broker", "strom.coordinator", "strom.cluster",
                         "strom.storage", "strom.record", "strom.protocol", "strom.config")
    assert _under(_reachable(graph, sorted(server_side)), "strom.console") == set()


def test_layer_check_sees_a_violation() -> None:
    graph = {"s.a": {"s.b"}, "s.b": {"x.c"}, "x.c": set()}
    assert _under(_reachable(graph, ["s.a"]), "x") == {"x.c"}
