"""Numbered schema migrations for PostgreSQL, applied when a queue is opened.

Migrations are the files ``NNNN_name.sql`` in the project's
``migrations/postgresql/`` folder (see sqlq.migration_files.folder).  A database
(more exactly: the schema that the connection's ``search_path`` names first) that
is behind is brought up to date in one transaction that first takes an advisory
lock, so processes opening a new database at once wait for each other and only
the first migrates; each
migration is recorded in ``sqlq_migrations`` with its checksum, as on SQLite.
PostgreSQL's DDL is transactional: a migration that fails leaves nothing.

The database may hold the user's own tables (transactional enqueue shares it);
only sqlq's are looked at.  ``sqlq_tasks`` without the record of migrations is
someone else's table: refused (NotASqlqDatabase), as is a schema newer than this
library (SchemaTooNew) or records that are not sqlq's own.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..errors import InvalidConfig, NotASqlqDatabase, SchemaError, SchemaTooNew
from ..migration_files import Migration, read_migrations
from ..registry import refuse_older_workers
from .driver import psycopg
from .queries import Q

#: The migration that made sqlq_clock.schema_version: from it on, each migration stamps
#: its version there, which every call compares with its process's (SchemaChanged).
STAMPED_SINCE = 11
#: The migration that made the worker registry (sqlq_workers).
WORKERS_SINCE = 9


@cache
def migrations() -> tuple[Migration, ...]:
    return read_migrations("postgresql", Migration)


def latest_version() -> int:
    return migrations()[-1].version


def applied_version(cur: Any, name: str) -> int:
    """The schema version of the database (0: sqlq's tables are not there yet).
    Reads only; refuses a foreign sqlq_tasks and records that are not sqlq's."""
    has_migrations, has_others = cur.execute(Q.identify).fetchone()
    if not has_migrations:
        if has_others:
            raise NotASqlqDatabase(
                f"{name}: has tables of sqlq's names (sqlq_tasks, sqlq_clock, ...) that sqlq "
                "did not create (no sqlq_migrations); refusing to touch them"
            )
        return 0
    try:
        with cur.connection.transaction():  # a savepoint: the error leaves the rest usable
            records = cur.execute(Q.migration_records).fetchall()
    except psycopg.errors.UndefinedColumn as exc:
        raise NotASqlqDatabase(
            f"{name}: has a sqlq_migrations table that sqlq did not create; refusing to touch it"
        ) from exc
    own = [(m.version, m.name, m.checksum) for m in migrations()]
    version = len(records)
    if version > latest_version():
        raise SchemaTooNew(
            f"{name}: the database is at schema version {records[-1][0]}, but this sqlq "
            f"knows versions up to {latest_version()}; upgrade sqlq"
        )
    if [tuple(r) for r in records] != own[:version]:
        raise SchemaError(
            f"{name}: the records in sqlq_migrations are not sqlq's own migrations "
            "(edited, or made by a different sqlq); refusing to touch the database"
        )
    return version


def ensure_schema(conn: Any, name: str, force: bool = False) -> int:
    """Bring the database up to the latest version (creating sqlq's tables if they
    are missing); return the version it was at before.  ``conn`` is a psycopg
    connection outside any transaction.  The usual case, a current database, costs
    one transaction of two reads and takes no lock.  A migration is refused
    (WorkersRunning, nothing changed) while the worker registry shows live workers
    of an older schema, unless ``force``."""
    latest = latest_version()
    with conn.transaction():
        found = applied_version(conn.cursor(), name)
    if found == latest:
        return found
    with conn.transaction():
        cur = conn.cursor()
        cur.execute(Q.lock_migrations)
        version = applied_version(cur, name)  # another process may have migrated meanwhile
        if version == 0:
            _need_a_schema(cur, name)
        if WORKERS_SINCE <= version < latest and not force:
            if version < STAMPED_SINCE:
                rows = cur.execute(Q.live_workers_unversioned).fetchall()
            else:
                rows = cur.execute(Q.live_older_workers, {"latest": latest}).fetchall()
            refuse_older_workers(name, rows, version, latest)
        cur.execute(Q.create_migrations_table)
        for migration in migrations()[version:]:
            cur.execute(migration.sql)
            if migration.version >= STAMPED_SINCE:
                cur.execute(Q.stamp_schema, {"version": migration.version})
            cur.execute(
                Q.record_migration,
                {"version": migration.version, "name": migration.name,
                 "checksum": migration.checksum},
            )  # fmt: skip
    return found


def check_schema(conn: Any, name: str) -> int:
    """The version of a sqlq database, opened as it is; refuses (without writing)
    one that has no sqlq tables, or a newer or foreign schema."""
    with conn.transaction():
        cur = conn.cursor()
        version = applied_version(cur, name)
        if version == 0:
            _need_a_schema(cur, name)  # what migrating would say, not "migrate creates them"
    if version == 0:
        raise NotASqlqDatabase(
            f"{name}: has no sqlq tables yet (opening a sqlq.Queue on it, `sqlq add` or "
            "`sqlq migrate` creates them)"
        )
    return version


def _need_a_schema(cur: Any, name: str) -> None:
    """Refuse a search_path none of whose schemas exists: sqlq creates its tables, not
    the schema they go in (a name that is a typo must not become a new schema)."""
    if cur.execute(Q.current_schema).fetchone()[0] is None:
        raise InvalidConfig(
            f"{name}: no schema of the search_path exists, so there is none to create "
            "sqlq's tables in; create it first (CREATE SCHEMA ...) or name one that exists"
        )
