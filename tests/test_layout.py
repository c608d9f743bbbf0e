"""The package's shape (issue 26): modules of one job, none over 600 lines, and no import circle.

Every import between modules of sqlq/ counts, also those under ``if TYPE_CHECKING:`` and those
inside functions: a lazy import hides a circle from Python, not from the reader. The allowlists name
what was still to be cut when the test was written; each entry must still occur (a stale entry
fails), so the lists only shrink.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sqlq"
MOST_LINES = 600

# Modules still over MOST_LINES (remove an entry when its module is split).
OVERSIZED: set[str] = {
    "sqlq.backend",
    "sqlq.postgresql.backend",
    "sqlq.sqlite.backend",
    "sqlq.tasks",
    "sqlq.worker",
}

# Import edges allowed to close a circle (remove an entry when its edge is cut).
CIRCLE_EDGES: set[tuple[str, str]] = {
    ("sqlq.backend", "sqlq.browse"),
    ("sqlq.monitor", "sqlq.worker"),
}


def module_files() -> dict[str, Path]:
    """Every module of the package, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports, wherever in the file the import stands."""

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                for alias in node.names
            ]
        for target in targets:
            module = known(target)
            if module is not None and module != name:
                edges.add(module)
    return edges


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
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


def test_no_module_is_over_the_limit() -> None:
    sizes = {name: len(path.read_text().splitlines()) for name, path in module_files().items()}
    over = {name for name, lines in sizes.items() if lines > MOST_LINES}
    assert over <= OVERSIZED, {name: sizes[name] for name in over - OVERSIZED}
    assert over >= OVERSIZED, f"split now, remove from OVERSIZED: {sorted(OVERSIZED - over)}"


def test_no_import_circle() -> None:
    graph = import_graph()
    stale = {(a, b) for a, b in CIRCLE_EDGES if b not in graph.get(a, set())}
    assert not stale, f"no longer imported, remove from CIRCLE_EDGES: {sorted(stale)}"
    for source, target in CIRCLE_EDGES:
        graph[source].discard(target)
    assert circles(graph) == []


def test_the_checks_see_a_circle_and_a_lazy_import(tmp_path: Path) -> None:
    """The checker itself: a circle closed only by an import inside a function is still one."""
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from . import a\n")
    modules = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert circles(graph) == [["p.a", "p.b"]]
    assert circles({"p.a": {"p.b"}, "p.b": set()}) == []
