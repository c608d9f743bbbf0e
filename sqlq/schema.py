"""The schema the code expects, declared with SQLAlchemy Core.

The migrations in ``migrations/sqlite/`` build the database; this declaration is
what the queries in ``sqlq/sqlite/queries.sql`` are written against.
``tests/test_schema.py`` builds a database from all migrations, reflects it, and
checks that it matches this declaration exactly (tables, columns, types,
nullability, keys, indexes and CHECK constraints), so the two cannot drift.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Column,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.types import REAL, UserDefinedType


class ANY(UserDefinedType[object]):
    """SQLite's ANY column type of STRICT tables: any value, stored as given."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "ANY"


metadata = MetaData()

#: sqlq_tasks' state machine, one CASE branch a state (migration 14): what each
#: state requires of the deadline, the token, the wake-up and finish times, the
#: attempts, a stop request and a result; any other state fails (ELSE 0).
STATE_MACHINE_SQL = """CASE state
    WHEN 'RESERVED' THEN deadline IS NOT NULL AND lease_id IS NOT NULL AND run_at IS NULL
                         AND finished_at IS NULL AND attempts >= 1 AND result IS NULL
    WHEN 'COMPLETED' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NOT NULL
                          AND attempts >= 1
    WHEN 'AVAILABLE' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NULL
                          AND attempts < max_attempts AND stop_requested_at IS NULL
                          AND result IS NULL
    WHEN 'WAITING' THEN deadline IS NULL AND run_at IS NOT NULL AND finished_at IS NULL
                        AND attempts < max_attempts AND stop_requested_at IS NULL
                        AND result IS NULL
    WHEN 'DEAD' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NOT NULL
                     AND attempts = max_attempts AND stop_requested_at IS NULL
                     AND result IS NULL
    WHEN 'CANCELLED' THEN deadline IS NULL AND run_at IS NULL AND finished_at IS NOT NULL
                          AND result IS NULL
    ELSE 0 END"""

migrations = Table(
    "sqlq_migrations",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("name", Text, nullable=False),
    Column("checksum", Text, nullable=False),
    Column("applied_at", REAL, nullable=False),
    sqlite_strict=True,
)

clock = Table(
    "sqlq_clock",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("now", REAL, nullable=False),
    Column("counter", Integer, nullable=False),
    Column("grouped", Integer, nullable=False, server_default=text("0")),
    Column("paused", Integer, nullable=False, server_default=text("0")),
    Column("schema_version", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("id = 1"),
    CheckConstraint("now >= 0"),
    CheckConstraint("counter >= 0"),
    CheckConstraint("grouped IN (0, 1)"),
    CheckConstraint("paused IN (0, 1)"),
    sqlite_strict=True,
)

#: sqlq_tasks checks its state machine, not the values every write of sqlq checks
#: before its statement (migration 13), in one CHECK (migration 14).
tasks = Table(
    "sqlq_tasks",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("queue", Text, nullable=False),
    Column("task_id", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("lease_id", Integer, nullable=True),
    Column("deadline", REAL, nullable=True),
    Column("run_at", REAL, nullable=True),
    Column("payload", ANY, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("retry_kind", Text, nullable=False, server_default=text("'immediate'")),
    Column("retry_base", REAL, nullable=False, server_default=text("0")),
    Column("retry_cap", REAL, nullable=False, server_default=text("0")),
    Column("created_at", REAL, nullable=False),
    Column("updated_at", REAL, nullable=False),
    Column("finished_at", REAL, nullable=True),
    Column("name", Text, nullable=True),
    Column("stop_requested_at", REAL, nullable=True),
    Column("result", Text, nullable=True),
    Column("progress", REAL, nullable=True),
    Column("progress_message", Text, nullable=True),
    Column("dedupe_key", Text, nullable=True),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("aging", REAL, nullable=False, server_default=text("60")),
    Column("line_key", REAL, nullable=False, server_default=text("0")),
    Column("group_key", Text, nullable=True),
    UniqueConstraint("queue", "task_id"),
    CheckConstraint("attempts >= 0"),
    CheckConstraint("max_attempts >= 1"),
    CheckConstraint("attempts <= max_attempts"),
    CheckConstraint(STATE_MACHINE_SQL),
    sqlite_strict=True,
)

Index(  # the ungrouped line (group_key IS NULL) and every group's line
    "sqlq_tasks_line",
    tasks.c.queue,
    tasks.c.group_key,
    tasks.c.line_key,
    tasks.c.seq,
    sqlite_where=text("state = 'AVAILABLE'"),
)
Index(
    "sqlq_tasks_leases",
    tasks.c.queue,
    tasks.c.deadline,
    tasks.c.lease_id,
    sqlite_where=text("deadline IS NOT NULL"),
)
Index(
    "sqlq_tasks_waiting",
    tasks.c.queue,
    tasks.c.run_at,
    tasks.c.seq,
    sqlite_where=text("run_at IS NOT NULL"),
)
Index(
    "sqlq_tasks_finished",
    tasks.c.queue,
    tasks.c.state,
    tasks.c.finished_at,
    sqlite_where=text("finished_at IS NOT NULL"),
)
# The dedupe keys' indexes (sqlq_tasks_key_holder, sqlq_tasks_key_finished) are made by
# the first keyed add of a file (migrations/sqlite/on_demand/0002), not declared here.

schedules = Table(
    "sqlq_schedules",
    metadata,
    Column("queue", Text, primary_key=True),
    Column("name", Text, primary_key=True),
    Column("task", Text, nullable=True),
    Column("spec", Text, nullable=False),
    Column("tz", Text, nullable=False),
    Column("catch_up", Text, nullable=False),
    Column("handled_until", REAL, nullable=False),
    Column("last_enqueued", REAL, nullable=True),
    Column("updated_at", REAL, nullable=False),
    CheckConstraint("length(queue) > 0"),
    CheckConstraint("length(name) > 0"),
    CheckConstraint("length(task) > 0"),
    CheckConstraint("length(spec) > 0"),
    CheckConstraint("length(tz) > 0"),
    CheckConstraint("catch_up = 'all' OR catch_up = 'latest' OR catch_up = 'none'"),
    sqlite_strict=True,
)

paused = Table(
    "sqlq_paused",
    metadata,
    Column("queue", Text, primary_key=True, nullable=False),
    Column("paused_at", REAL, nullable=False),
    CheckConstraint("length(queue) > 0"),
    sqlite_strict=True,
    sqlite_with_rowid=False,
)

limits = Table(
    "sqlq_limits",
    metadata,
    Column("queue", Text, primary_key=True, nullable=False),
    Column("group_key", Text, primary_key=True, nullable=False),
    Column("concurrency", Integer, nullable=True),
    Column("rate", Integer, nullable=True),
    Column("per", REAL, nullable=True),
    CheckConstraint("length(queue) > 0"),
    CheckConstraint("concurrency >= 1"),
    CheckConstraint("rate >= 1"),
    CheckConstraint("per > 0"),
    CheckConstraint("(rate IS NULL) = (per IS NULL)"),
    sqlite_strict=True,
    sqlite_with_rowid=False,
)

groups = Table(
    "sqlq_groups",
    metadata,
    Column("queue", Text, primary_key=True, nullable=False),
    Column("group_key", Text, primary_key=True, nullable=False),
    Column("live", Integer, nullable=False, server_default=text("0")),
    Column("running", Integer, nullable=False, server_default=text("0")),
    Column("head_key", REAL, nullable=True),
    Column("head", Integer, nullable=True),
    Column("cap", Integer, nullable=False),
    Column("spacing", REAL, nullable=True),
    Column("tat", REAL, nullable=False, server_default=text("0")),
    Column("turn", Integer, nullable=False, server_default=text("0")),
    CheckConstraint("length(queue) > 0"),
    CheckConstraint("length(group_key) > 0"),
    CheckConstraint("live >= 0"),
    CheckConstraint("running >= 0"),
    CheckConstraint("cap >= 1"),
    CheckConstraint("spacing > 0"),
    sqlite_strict=True,
    sqlite_with_rowid=False,
)

_READY = "head IS NOT NULL AND running < cap"
Index(
    "sqlq_groups_by_head",
    groups.c.queue,
    groups.c.head_key,
    groups.c.head,
    sqlite_where=text(_READY),
)
Index(
    "sqlq_groups_by_turn",
    groups.c.queue,
    groups.c.turn,
    groups.c.head_key,
    groups.c.head,
    sqlite_where=text(_READY),
)
Index("sqlq_groups_live", groups.c.queue, sqlite_where=text("live > 0"))

workers = Table(
    "sqlq_workers",
    metadata,
    Column("worker_id", Text, primary_key=True, nullable=False),
    Column("queue", Text, nullable=False),
    Column("host", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("started_at", REAL, nullable=False),
    Column("beat_at", REAL, nullable=False),
    Column("stale_at", REAL, nullable=False),
    Column("holds", Text, nullable=False),
    Column("schema_version", Integer, nullable=False, server_default=text("0")),
    Column("sqlq_version", Text, nullable=False, server_default=text("''")),
    CheckConstraint("length(worker_id) > 0"),
    CheckConstraint("length(queue) > 0"),
    CheckConstraint("pid >= 0"),
    CheckConstraint("concurrency >= 1"),
    sqlite_strict=True,
    sqlite_with_rowid=False,
)

settings = Table(
    "sqlq_settings",
    metadata,
    Column("queue", Text, primary_key=True, nullable=False),
    Column("lease_seconds", REAL, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("retry_kind", Text, nullable=False),
    Column("retry_base", REAL, nullable=False),
    Column("retry_cap", REAL, nullable=False),
    Column("updated_at", REAL, nullable=False),
    CheckConstraint("length(queue) > 0"),
    CheckConstraint("lease_seconds >= 0"),
    CheckConstraint("max_attempts >= 1"),
    sqlite_strict=True,
    sqlite_with_rowid=False,
)

#: Read-only views for people at the sqlite3 shell (their SQL is in the migrations).
VIEWS = ("sqlq_dead_letters", "sqlq_leases", "sqlq_queue_stats")
