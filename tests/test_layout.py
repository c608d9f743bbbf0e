"""The package's shape (issue 26): modules of one job, none over 600 lines, and no import circle.

Every import between modules of sqlq/ counts, also those under ``if TYPE_CHECKING:`` and those
inside functions (a lazy import hides a circle from Python, not from the reader), and importing a
module of a sub-package counts as importing the sub-package, whose ``__init__`` runs first.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "sqlq"
MOST_LINES = 600


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
            if module is None:
                continue
            edges.add(module)
            # Importing sqlq.a.b runs sqlq/a/__init__.py first: a package between the root and
            # the module is imported too (the root is every module's; it is left out).
            parts = module.split(".")
            edges.update(".".join(parts[:end]) for end in range(2, len(parts)))
    return {edge for edge in edges if edge != name and not name.startswith(f"{edge}.")}


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
    assert {name: lines for name, lines in sizes.items() if lines > MOST_LINES} == {}


def test_no_import_circle() -> None:
    assert circles(import_graph()) == []


def test_the_checks_see_a_circle_and_a_lazy_import(tmp_path: Path) -> None:
    """The checker itself: a circle closed only by an import inside a function is still one."""
    (tmp_path / "a.py").write_text("from .b import x\n")
    (tmp_path / "b.py").write_text("def f():\n    from . import a\n")
    modules = {"p.a": tmp_path / "a.py", "p.b": tmp_path / "b.py"}
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert circles(graph) == [["p.a", "p.b"]]
    assert circles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_a_module_of_a_subpackage_imports_the_subpackage(tmp_path: Path) -> None:
    """records -> contract.states runs contract/__init__, which may import records back."""
    (tmp_path / "records.py").write_text("from .contract.states import Number\n")
    modules = {
        "sqlq.records": tmp_path / "records.py",
        "sqlq.contract": tmp_path,
        **{"sqlq.contract.states": tmp_path / "records.py"},
    }
    assert imports_of("sqlq.records", tmp_path / "records.py", modules) == {
        "sqlq.contract",
        "sqlq.contract.states",
    }
