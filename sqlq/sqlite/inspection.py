"""A SQLite backend's reads for the commands and the dashboard: the figures of
stats and snapshots, the overview of every queue, browsing tasks, versions.  Each
runs in one read snapshot without the write lock, as last written.
"""

from __future__ import annotations

from typing import Any

from ..backend import Figures
from ..browse import Browse, Found, task_row
from ..contract import Number, State
from ..records import QueueOverview, SchemaVersions, overviews
from ..sqlstore import in_snapshot
from . import driver
from .migrate import latest_version
from .queries import Q
from .waiting import Waiting


class Inspection(Waiting):
    """SqliteBackend's reads for the commands and the dashboard."""

    def snapshot(self, queue: str) -> Figures:
        return self._read(lambda conn: in_snapshot(conn, Q, Q.begin_read, figures, queue))

    def describe(self) -> str:
        return driver.describe()

    def schema_versions(self) -> SchemaVersions:
        return SchemaVersions(self.schema_found, self.schema_version, latest_version())

    def overview(self, with_names: bool) -> dict[str, QueueOverview]:
        return self._read(lambda conn: in_snapshot(conn, Q, Q.begin_read, _overview, with_names))

    def browse(self, where: Browse) -> list[Found]:
        statement = Q.browse_newest if where.order == "newest" else Q.browse_line
        return self._read(lambda conn: _browsed(conn, statement, where.params()))


def figures(cur: Any, queue: str) -> Figures:
    """The figures of Queue.stats, read with ``cur`` (in a transaction: one snapshot)."""
    counts = dict.fromkeys((s.value for s in State), 0)
    counts.update(dict(cur.execute(Q.count_queue_states, {"queue": queue}).fetchall()))
    (paused,) = cur.execute(Q.queue_paused, {"queue": queue}).fetchone()
    return counts, *_fronts(cur, queue), bool(paused)


def _fronts(cur: Any, queue: str) -> tuple[Number | None, Number | None, Number | None]:
    """When the front of the queue's line became AVAILABLE, its next deadline and its
    next run_at (each None if there is none)."""
    params = {"queue": queue}
    front = cur.execute(Q.front_of_line, params).fetchone()
    (deadline,) = cur.execute(Q.next_deadline, params).fetchone()
    (run_at,) = cur.execute(Q.next_run_at, params).fetchone()
    return None if front is None else front[0], deadline, run_at


def _overview(cur: Any, with_names: bool) -> dict[str, QueueOverview]:
    """SqliteBackend.overview, read with ``cur`` (in a transaction: one snapshot)."""
    states = _counted(cur)
    names = cur.execute(Q.count_names).fetchall() if with_names else []
    paused = [queue for (queue,) in cur.execute(Q.paused_queues).fetchall()]
    return overviews(states, names, lambda queue: _fronts(cur, queue), paused)


def _counted(cur: Any) -> list[tuple[str, str, int]]:
    """(queue, state, count) of every task, through the indexes when they account for
    every task (a state of a newer schema that none of them covers: row by row)."""
    states: list[tuple[str, str, int]] = cur.execute(Q.count_states_by_index).fetchall()
    (total,) = cur.execute(Q.count_tasks).fetchone()
    if sum(count for _, _, count in states) != total:
        states = cur.execute(Q.count_states).fetchall()
    return states


def _browsed(conn: Any, statement: str, params: dict[str, Any]) -> list[Found]:
    """The tasks a browse statement finds (one statement: one snapshot)."""
    cur = conn.execute(statement, params)
    columns = [d[0] for d in cur.description]
    return [task_row(columns, row) for row in cur.fetchall()]
