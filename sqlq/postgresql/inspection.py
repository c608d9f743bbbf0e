"""A PostgreSQL backend's reads for the commands and the dashboard (figures,
overview, browsing tasks, versions) and its maintenance (VACUUM FULL; checkpoints
and backups are the server's business).
"""

from __future__ import annotations

from typing import Any

from ..backend import Figures
from ..browse import Browse, Found, task_row
from ..contract import State
from ..errors import InvalidConfig
from ..records import Checkpoint, Compaction, QueueOverview, SchemaVersions, StorageFacts, overviews
from ..sqlstore import in_snapshot
from .calls import Calls
from .driver import psycopg
from .migrate import latest_version
from .queries import Q
from .text import read, stored_or_none


class Inspection(Calls):
    """PostgresBackend's reads and maintenance (what a transaction needs of it)."""

    def snapshot(self, queue: str) -> Figures:
        return self._read(lambda cur: figures(cur, queue))

    def storage_facts(self) -> StorageFacts:
        return StorageFacts()  # no write-ahead log of its own: the server's is shared

    def checkpoint(self) -> Checkpoint:
        """Nothing to do: what committed is in the server's WAL, which the server
        checkpoints itself; there is no log of this database alone to copy."""
        return Checkpoint(busy=False, wal_frames=0, checkpointed=0, wal_bytes=None)

    def describe(self) -> str:
        """'PostgreSQL 15.18 (psycopg 3.3.9)': the server's version and the driver's."""
        version = self._read(lambda cur: cur.connection.info.parameter_status("server_version"))
        return f"PostgreSQL {version or '?'} (psycopg {psycopg.__version__})"

    def schema_versions(self) -> SchemaVersions:
        return SchemaVersions(self.schema_found, self.schema_version, latest_version())

    def overview(self, with_names: bool) -> dict[str, QueueOverview]:
        return self._read(lambda cur: in_snapshot(cur, Q, Q.begin_snapshot, _overview, with_names))

    def compact(self) -> Compaction:
        """VACUUM FULL of sqlq_tasks; the sizes are the table's with its indexes."""

        def vacuum(cur: Any) -> Compaction:
            (before,) = cur.execute(Q.table_size).fetchone()
            cur.execute(Q.vacuum_full)
            (after,) = cur.execute(Q.table_size).fetchone()
            return Compaction(before, after)

        return self._read(vacuum)

    def backup(self, dest: str) -> int:
        raise InvalidConfig(
            f"{self._name}: a database on a server is not copied to a file by sqlq; back it "
            "up with the server's tools (pg_dump --table 'sqlq_*', or your backups of the "
            "whole database)"
        )

    def browse(self, where: Browse) -> list[Found]:
        statement = Q.browse_newest if where.order == "newest" else Q.browse_line
        params = where.params()
        params["prefix"] = stored_or_none(where.prefix)

        def page(cur: Any) -> list[Found]:
            cur.execute(statement, params)
            columns = [d.name for d in cur.description]
            return [task_row(columns, row, read) for row in cur.fetchall()]

        return self._read(page)


def figures(cur: Any, queue: str) -> Figures:
    """The figures of Queue.stats, in one statement (one snapshot)."""
    per_state, front, deadline, run_at, paused = cur.execute(
        Q.queue_figures, {"queue": queue}
    ).fetchone()
    counts = dict.fromkeys((s.value for s in State), 0)
    counts.update(per_state)
    return counts, front, deadline, run_at, paused


def _overview(cur: Any, with_names: bool) -> dict[str, QueueOverview]:
    states = cur.execute(Q.count_states).fetchall()
    names = cur.execute(Q.count_names).fetchall() if with_names else []
    fronts = {
        queue: (since, deadline, run_at)
        for queue, since, deadline, run_at in cur.execute(Q.queue_fronts)
    }
    paused = [queue for (queue,) in cur.execute(Q.paused_queues).fetchall()]
    return overviews(states, names, lambda queue: fronts.get(queue, (None, None, None)), paused)
