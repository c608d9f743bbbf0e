"""Directives that write reference pages from sqlq's own code, so that they cannot drift:

* ``sqlq-schema``: the tables as sqlq.schema declares them (tests/test_schema.py checks
  that declaration against a database the migrations built), and the views as the last
  migration that creates each one defines it;
* ``sqlq-metrics``: the Prometheus metrics, as the collectors that serve them answer:
  the database's (``sqlq metrics``, the dashboard's /metrics: sqlq.web.metrics) and a
  worker's own (``Worker(metrics_port=...)``: sqlq.worker.metrics);
* the errors each call of a queue raises, added to its description as ``:raises:``
  fields (``raises``): those every call of its kind shares, by what the call takes
  (arguments, ``now``) and where the queue lives (a database, or memory), and the call's
  own.
"""

from __future__ import annotations

import inspect
import re
import tempfile
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

SQLQ = Path(__file__).resolve().parents[2] / "sqlq"


class _Generated(SphinxDirective):
    """A directive whose content is reStructuredText made by ``lines()``."""

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(
            StringList(self.lines(), source=self.get_source_info()[0]),
            self.content_offset,
            container,
            match_titles=True,
        )
        return container.children


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}")
        lines.extend(f"     - {cell}" for cell in row[1:])
    return [*lines, ""]


def _code(sql: str) -> list[str]:
    return [".. code-block:: sql", "", *(f"   {line}" for line in sql.splitlines()), ""]


def view_definitions(migrations: Path) -> dict[str, str]:
    """Each view's CREATE VIEW statement, from the last migration that creates it."""
    views: dict[str, str] = {}
    for path in sorted(migrations.glob("*.sql")):
        text = path.read_text("utf-8")
        for match in re.finditer(r"^CREATE VIEW (\w+) AS\n.*?;$", text, re.S | re.M):
            views[match.group(1)] = match.group(0)
    return views


class Schema(_Generated):
    """The SQLite schema: tables (columns, constraints, indexes) and views."""

    def lines(self) -> list[str]:
        from sqlalchemy.dialects import sqlite
        from sqlalchemy.schema import CreateIndex, CreateTable

        from sqlq import schema

        dialect = sqlite.dialect()
        out: list[str] = []
        from sqlq import migration_files

        migrations = Path(str(migration_files.folder("sqlite")))
        self.env.note_dependency(str(SQLQ / "schema.py"))
        for table in schema.metadata.sorted_tables:
            out += [table.name, "~" * len(table.name), ""]
            rows = [
                [
                    f"``{c.name}``",
                    f"``{c.type.compile(dialect)}``",
                    "yes" if c.nullable else "no",
                    "yes" if c.primary_key else "",
                ]
                for c in table.columns
            ]
            out += _table(["column", "type", "null", "key"], rows)
            ddl = str(CreateTable(table).compile(dialect=dialect)).strip()
            for index in sorted(table.indexes, key=lambda i: str(i.name)):
                ddl += ";\n" + str(CreateIndex(index).compile(dialect=dialect)).strip()
            out += _code(ddl + ";")
        views = view_definitions(migrations)
        for path in sorted(migrations.glob("*.sql")):
            self.env.note_dependency(str(path))
        for name in schema.VIEWS:
            out += [name, "~" * len(name), ""]
            out += _code(views[name])
        return out


def metric_families() -> list[tuple[str, str, str, str, str]]:
    """(source, name as scraped, type, labels, help) of every metric sqlq serves."""
    from sqlq.backends import open_backend
    from sqlq.web.metrics import DatabaseCollector
    from sqlq.worker.metrics import WorkerMetrics

    found: list[tuple[str, str, str, str, str]] = []

    def add(source: str, families: Any) -> None:
        for family in families:
            labels = sorted({k for s in family.samples for k in s.labels} - {"le"})
            name = {
                "counter": f"{family.name}_total",
                "histogram": f"{family.name}_bucket, _sum, _count",
            }.get(family.type, family.name)
            found.append((source, name, family.type, ", ".join(labels), family.documentation))

    with tempfile.TemporaryDirectory() as tmp:
        backend = open_backend(str(Path(tmp) / "metrics.db"))
        try:
            import sqlq

            with sqlq.Queue(str(Path(tmp) / "metrics.db")) as queue:
                queue.add("a-task")  # so that every per-queue family has its labels
            add("database", DatabaseCollector(backend).collect())
        finally:
            backend.close()
    worker = WorkerMetrics("default", port=0)
    worker.counted("a-task", "completed")
    worker.handled("a-task", "completed", 0.1)
    worker.transaction(0.01)
    add("worker", worker.registry.collect())
    return found


class Metrics(_Generated):
    """The metrics of one source: ``database`` or ``worker``."""

    required_arguments = 1

    def lines(self) -> list[str]:
        source = self.arguments[0]
        rows = [
            [f"``{name}``", kind, ", ".join(f"``{x}``" for x in labels.split(", ") if x), text]
            for origin, name, kind, labels, text in metric_families()
            if origin == source
        ]
        if not rows:
            raise self.error(f"sqlq-metrics: no metrics from {source!r}")
        return _table(["metric", "type", "labels", "help"], rows)


#: The queues whose calls get ``:raises:`` fields, and whether each is durable (a
#: database behind it: it may fail, and it can be closed).
QUEUES = {"sqlq.Queue": True, "sqlq.AsyncQueue": True, "sqlq.WorkQueue": False}
#: Calls that neither touch the database nor refuse a closed queue.
LOCAL_CALLS = {"close", "interrupt_waits"}
#: The errors particular to a call, beside those its kind of queue shares.
OWN_ERRORS = {
    "result": [
        ("NoResult", "the id is unknown, or the task is not COMPLETED"),
        ("TaskDead", "the task is DEAD (a NoResult, with its last error)"),
    ],
    "wait_for_result": [
        ("TaskDead", "the task went DEAD"),
        ("ResultTimeout", "``timeout`` passed before the task was COMPLETED or DEAD"),
    ],
}


def raises(queue: str, call: str, function: Any) -> list[tuple[str, str]]:
    """The errors a call of a queue raises, each with when."""
    try:
        parameters = set(inspect.signature(function).parameters) - {"self"}
    except (TypeError, ValueError):
        parameters = set()
    durable = QUEUES[queue] and call not in LOCAL_CALLS
    found = []
    if parameters:
        found.append(
            ("InvalidArgument", "an argument of the wrong type or outside its limits; "
             "nothing was read or written")
        )  # fmt: skip
    found += OWN_ERRORS.get(call, [])
    if durable:
        found.append(
            ("StorageError", "the database failed (Busy, StorageFull, Unavailable, ...: "
             "see :doc:`/reference/errors`); the call's transaction was rolled back")
        )  # fmt: skip
        if "now" in parameters and queue == "sqlq.Queue":
            found.append(
                ("ClockSkew", "``now`` not given, and this process's clock runs ahead of "
                 "the kernel's")
            )  # fmt: skip
        found.append(("QueueClosed", "the queue was closed"))
    return found


def _add_raises(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    queue, _, call = name.rpartition(".")
    if what != "method" or queue not in QUEUES or call.startswith("_"):
        return
    found = raises(queue, call, obj)
    if found:
        lines += ["", *(f":raises ~sqlq.errors.{error}: {when}" for error, when in found)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("sqlq-schema", Schema)
    app.add_directive("sqlq-metrics", Metrics)
    app.connect("autodoc-process-docstring", _add_raises)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
