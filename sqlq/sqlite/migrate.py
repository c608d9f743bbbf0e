"""Numbered schema migrations, applied in order when a queue is opened.

Migrations are the files ``NNNN_name.sql`` in the project's ``migrations/sqlite/``
folder (inside the package in a wheel; found by sqlq.migration_files.folder from a
wheel, a source tree or an editable install alike).  Each is applied in its own
transaction together with its row in ``sqlq_migrations``, so a database is
always at exactly one version.  The usual case, a database that is already current, costs two
queries and takes no lock.

A sqlq database says so in its header (``PRAGMA application_id``, set by
migration 4); one made before that is recognised by its ``sqlq_migrations``
rows being exactly sqlq's own.  Anything else with tables, or with a header
field set (sqlq's id without the record of migration 4 too), is foreign, and
so is a file that is not a SQLite database: they are refused with a
:class:`sqlq.errors.SchemaError` before anything is written to them, and so is
a schema newer than this library.

On-demand migrations (``migrations/sqlite/on_demand/``, numbered 1, 2, ... apart) hold
schema that only some databases need and that would cost the others on every call
(the group triggers: see migration 11).  The first call that needs one applies it in
that call's write transaction (apply_on_demand) and records it with the negative of its
number, its name and checksum; tests/test_schema.py checks both states of a file.
They hold triggers and indexes, and statements that may run again (``UPDATE ... SET
grouped = 1``).  A numbered migration that rebuilds a table drops its triggers and
indexes (0013 rebuilds sqlq_tasks): after each numbered migration, the objects of the
on-demand migrations the file recorded that are gone are made again, with the other
statements of their migration, in the numbered migration's transaction; and a file that
holds keyed tasks when it reaches 0013 (which left the key indexes to on-demand
migration 2) gets that one applied and recorded there (_restore_on_demand).

An empty file (no bytes, or a SQLite header without tables and with no header
field set: what an interrupted creation leaves) is a database not created yet.
Opening it to write creates it exactly as a missing path; opening it to read
refuses it.  Creating or migrating a database happens under an exclusive
``flock`` on ``<database>.migrate-lock``, taken before the database file is
created, so a process that finds a database empty or older than its sqlq first
waits for a creation or migration under way (at most ``timeout`` seconds) and
then looks again: no process fails because another is creating the file.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from .. import migration_files
from ..errors import (
    Busy,
    CannotOpen,
    NotASqlqDatabase,
    SchemaError,
    SchemaTooNew,
    StorageError,
)
from ..registry import refuse_older_workers
from . import files
from .driver import dbapi
from .queries import Q

#: The header's application id in a sqlq database: "sqlq" in ASCII (migration 4).
APPLICATION_ID = int.from_bytes(b"sqlq", "big")
#: The migrations made before the application id: a database at one of these
#: versions is recognised by its sqlq_migrations rows.
BEFORE_APPLICATION_ID = 3
#: The migration that made sqlq_clock.schema_version: from it on, each migration stamps
#: its version there, which every call compares with its process's (SchemaChanged).
STAMPED_SINCE = 15
#: The migration that made the worker registry (sqlq_workers).
WORKERS_SINCE = 12
#: Waiting for another process's migration lock: the longest pause, in seconds.
LOCK_POLL = 0.05


class Migration(migration_files.Migration):
    def statements(self) -> list[str]:
        """The file split into complete statements (SQLite's own notion of complete)."""
        out, pending = [], ""
        for line in self.sql.splitlines(keepends=True):
            pending += line
            if dbapi.complete_statement(pending):
                out.append(pending.strip())
                pending = ""
        if pending.strip() and not all(
            ln.strip().startswith("--") or not ln.strip() for ln in pending.splitlines()
        ):
            raise ValueError(f"migration {self.version} ends in an incomplete statement")
        return out


@cache
def migrations() -> tuple[Migration, ...]:
    return migration_files.read_migrations("sqlite", Migration)


@cache
def on_demand() -> tuple[Migration, ...]:
    """The on-demand migrations (``migrations/sqlite/on_demand/``): applied by the first call
    that needs them, not when a database is opened (see apply_on_demand)."""
    return migration_files.read_migrations("sqlite", Migration, "on_demand")


#: The on-demand migration of the group triggers (applied by the first grouped add).
GROUP_TRIGGERS = 1
#: The on-demand migration of the dedupe keys' indexes (applied by the first keyed add).
KEY_INDEXES = 2
#: On-demand migrations that a numbered migration may leave a file without although
#: it holds what they are for: (the numbered migration from which on, the query that
#: says the file needs it).  Migration 13 made the key indexes on-demand.
IN_USE = {KEY_INDEXES: (13, Q.holds_keys)}


def apply_on_demand(cur: Any, version: int) -> bool:
    """On-demand migration ``version``, inside the caller's write transaction, unless
    the database has it: recorded in sqlq_migrations under the version -``version``
    (negative: the schema's version stays the highest numbered migration's), with its
    name and checksum like any other, and its statements run only if that record is
    new.  One statement when it was applied before.  True if it was (so it is there
    for good: a rollback of the caller's transaction cannot take it away)."""
    migration = on_demand()[version - 1]
    record = (-version, migration.name, migration.checksum, time.time())
    if cur.execute(Q.record_on_demand, record).rowcount != 1:
        return True
    for statement in migration.statements():
        cur.execute(statement)
    return False


def _restore_on_demand(conn: Any, version: int) -> None:
    """After numbered migration ``version``, in its transaction: the on-demand migrations
    the database recorded whose objects (triggers, indexes) that migration dropped (a
    table rebuilt) run again, but for the objects still there; and those a file needs
    from this version on for what it holds (IN_USE) are applied and recorded."""
    for number, (since, in_use) in IN_USE.items():
        if version == since and conn.execute(in_use).fetchone()[0]:
            apply_on_demand(conn.cursor(), number)
    for (number,) in conn.execute(Q.on_demand_applied).fetchall():
        statements = on_demand()[number - 1].statements()
        made = [name for name in map(_made_name, statements) if name is not None]
        missing = {name for (name,) in conn.execute(Q.missing_objects, {"names": json.dumps(made)})}
        if missing:
            for statement in statements:
                name = _made_name(statement)
                if name is None or name in missing:
                    conn.execute(statement)


def _set_aside_user_objects(conn: Any, statements: list[str]) -> list[tuple[str, str, str]]:
    """Before a migration that rebuilds (drops) a table: the user's own views,
    triggers and indexes on it or naming it (Q.user_objects_on), views and triggers
    dropped now (a view on the dropped table would stop the rebuild's rename; the
    table's indexes go with it)."""
    kept: list[tuple[str, str, str]] = []
    for statement in statements:
        dropped = _DROP_TABLE.search(statement)
        if dropped is not None:
            kept += conn.execute(Q.user_objects_on, {"table": dropped[1].lower()}).fetchall()
    for kind, name, _ in kept:
        if kind != "index":
            conn.execute(f"DROP {kind.upper()} IF EXISTS {_quoted(name)}")
    return kept


def _make_again(conn: Any, kept: list[tuple[str, str, str]], version: int) -> None:
    """After the migration, in its transaction: the user's objects set aside, made
    again from their own SQL; one that no longer fits the schema stops the migration
    (the file stays at the version before), with its name."""
    for kind, name, sql in kept:
        try:
            conn.execute(sql)
            if kind == "view":  # (SQLite reads a view's columns only when it is used)
                conn.execute(f"SELECT * FROM {_quoted(name)} LIMIT 0").fetchall()
        except dbapi.Error as exc:
            raise SchemaError(
                f"migration {version} rebuilds a table your {kind} {name!r} uses, and cannot "
                f"make it again ({exc}); drop it, open the queue (which migrates the file), "
                f"then make it again to fit the new schema (sqlq/schema.py)"
            ) from exc


def _quoted(name: str) -> str:
    """A user's object name as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


_DROP_TABLE = re.compile(
    r"^\s*DROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)", re.IGNORECASE | re.MULTILINE
)


def _made_name(statement: str) -> str | None:
    """The name of the trigger or index a statement makes, or None."""
    found = _CREATE.search(statement)
    return None if found is None else found.group(1)


_CREATE = re.compile(r"^CREATE (?:UNIQUE )?(?:TRIGGER|INDEX) (\w+)", re.MULTILINE)


def latest_version() -> int:
    return migrations()[-1].version


def applied_version(conn: Any, path: str) -> int:
    """The schema version of a sqlq database, 0 for an empty file; refuses any
    other file (NotASqlqDatabase).  Reads only."""
    application_id, user_version, objects, has_migrations = conn.execute(Q.identify).fetchone()
    if application_id == APPLICATION_ID and has_migrations:
        version: int = conn.execute(Q.applied_version).fetchone()[0]
        if version > BEFORE_APPLICATION_ID:  # stamped together with the id: sqlq's own
            return version
    if application_id == 0 and user_version == 0 and objects == 0:
        return 0
    if application_id == 0 and has_migrations:
        records = conn.execute(Q.migration_records).fetchall()
        own = [(m.version, m.name, m.checksum) for m in migrations()[:BEFORE_APPLICATION_ID]]
        if records and records == own[: len(records)]:
            return len(records)
    raise NotASqlqDatabase(
        f"{path}: this SQLite database was not created by sqlq (neither sqlq's "
        "application id nor sqlq's own migration records); refusing to touch it"
    )


class Opening:
    """The connection that opening a file uses: opened by ``connect()`` on first use,
    replaced by a new one to look at the file again, closed if opening fails (a
    refused file keeps no connection, nor -wal/-shm files), else handed up to the
    caller, who keeps it."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        self._connect = connect
        self.conn: Any = None

    def __enter__(self) -> Opening:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if error is not None:
            self.close()

    def get(self) -> Any:
        if self.conn is None:
            self.conn = self._connect()
        return self.conn

    def fresh(self) -> Any:
        """A connection opened now (the schema checks look again on a new one)."""
        self.close()
        return self.get()

    def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            conn.close()


def ensure_schema(
    path: str,
    connect: Callable[[], Any],
    *,
    mode: int,
    timeout: float,
    force: bool = False,
) -> tuple[int, Any]:
    """Create the database at ``path`` if it is missing or empty, or bring it to the
    latest version; return the version it was at before (0: missing or empty) and the
    connection it used, open, in WAL mode, for the caller to keep.
    A migration is refused (WorkersRunning, nothing changed) while the worker registry
    shows live workers of an older schema, unless ``force``.

    ``connect()`` opens a new DB-API connection (autocommit mode); it is called once
    the file exists, and again to look at the file afresh.  A new database file gets
    ``mode``.  Waiting for another process's creation or migration lasts at most
    ``timeout`` seconds.  On an error every connection it opened is closed.
    """
    latest = latest_version()
    with Opening(connect) as opening:
        if os.path.exists(path):
            found = _settled_version(opening, path, timeout)
            if found == latest:
                _enable_wal(opening.get(), path)
                return latest, opening.conn
        with _migration_lock(path, mode, timeout):
            files.create_database_file(path, mode)
            conn = opening.get()
            version = _not_newer(applied_version(conn, path), path)  # another may have migrated
            if version == 0:
                _enable_wal(conn, path)
            elif version < latest and not force:
                _refuse_under_older_workers(conn, path, version)
            for migration in migrations()[version:]:
                _apply(conn, migration)
        _enable_wal(conn, path)
        return version, conn


def _refuse_under_older_workers(conn: Any, path: str, version: int) -> None:
    """WorkersRunning if the registry of a file at ``version`` shows live workers of an
    older schema: every live one before the registry said versions (STAMPED_SINCE)."""
    if version < WORKERS_SINCE:
        return
    now, latest = time.time(), latest_version()
    if version < STAMPED_SINCE:
        rows = conn.execute(Q.live_workers_unversioned, {"now": now}).fetchall()
    else:
        rows = conn.execute(Q.live_older_workers, {"now": now, "latest": latest}).fetchall()
    refuse_older_workers(path, rows, version, latest)


def check_schema(connect: Callable[[], Any], path: str, *, timeout: float) -> tuple[int, Any]:
    """The version of a sqlq database (an older one included), and the connection that
    read it, for the caller to keep; refuses (without writing) any other file, an
    empty one and a newer schema.  A database that is empty or older is looked at
    again, on a new connection, once a creation or migration under way in another
    process is over (waiting at most ``timeout`` seconds, then Busy).  ``connect()``
    opens a new connection outside any transaction."""
    with Opening(connect) as opening:
        version = _settled_version(opening, path, timeout)
        if version < latest_version():
            _wait_for_migration(path, timeout)
            version = _not_newer(applied_version(opening.fresh(), path), path)
        if version == 0:
            raise NotASqlqDatabase(
                f"{path}: the file is empty, not a sqlq database yet (opening a sqlq.Queue "
                "on it, `sqlq add` or `sqlq migrate` creates one)"
            )
        return version, opening.conn


def _settled_version(opening: Opening, path: str, timeout: float) -> int:
    """applied_version, not newer than this sqlq's; a file that looks foreign is looked
    at again (on a new connection) once any creation or migration under way is over:
    read while another process creates it, a new database has been seen to look
    like no sqlq database for a moment under heavy load."""
    try:
        return _not_newer(applied_version(opening.get(), path), path)
    except NotASqlqDatabase:
        _wait_for_migration(path, timeout)
        return _not_newer(applied_version(opening.fresh(), path), path)


def _not_newer(version: int, path: str) -> int:
    if version > latest_version():
        raise SchemaTooNew(
            f"{path}: the database is at schema version {version}, but this sqlq "
            f"knows versions up to {latest_version()}; upgrade sqlq"
        )
    return version


@contextmanager
def _migration_lock(path: str, mode: int, timeout: float) -> Iterator[None]:
    """Held while this process creates or migrates the database at ``path``.  An
    flock of sqlq's own, not filelock's: importing filelock (4.x) gives the process an
    audit hook for good on Python 3.12+, which triples the cost of every later flock
    of the write gate (bench/locks.py), and it has no shared lock for
    _wait_for_migration."""
    lock_path = path + ".migrate-lock"
    try:
        fd = files.open_side_file(lock_path, files.file_mode(path, mode))
    except OSError as exc:
        raise CannotOpen(
            f"{path}: cannot take {lock_path} to migrate the schema ({exc.strerror or exc})"
        ) from exc
    try:
        _flock_within(fd, fcntl.LOCK_EX, path, timeout)
        yield
    finally:
        os.close(fd)  # which lets go of the lock


def _wait_for_migration(path: str, timeout: float) -> None:
    """Until no process holds the migration lock (Busy after ``timeout`` seconds: what
    the caller found is still being written).  Never creates the lock file: where
    there is none, nobody is migrating."""
    try:
        fd = os.open(path + ".migrate-lock", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        _flock_within(fd, fcntl.LOCK_SH, path, timeout)
    finally:
        os.close(fd)


def _flock_within(fd: int, operation: int, path: str, timeout: float) -> None:
    """Take a flock on ``fd``, the migration lock of ``path``, within ``timeout``
    seconds (polling); Busy if it stayed taken."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, operation | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise Busy(
                    f"{path}: another process kept {path}.migrate-lock (creating or "
                    f"migrating the database) for longer than busy_timeout ({timeout:g} s)"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, LOCK_POLL)


def _enable_wal(conn: Any, path: str) -> None:
    (mode,) = conn.execute(Q.enable_wal).fetchone()
    if str(mode).lower() != "wal":
        raise StorageError(f"{path}: could not switch the database to WAL mode (got {mode!r})")


def _apply(conn: Any, migration: Migration) -> None:
    conn.execute(Q.begin_write)
    try:
        conn.execute(Q.create_migrations_table)
        statements = migration.statements()
        kept = _set_aside_user_objects(conn, statements)
        for statement in statements:
            conn.execute(statement)
        _restore_on_demand(conn, migration.version)
        _make_again(conn, kept, migration.version)
        if migration.version >= STAMPED_SINCE:
            conn.execute(Q.stamp_schema, {"version": migration.version})
        conn.execute(
            Q.record_migration,
            {
                "version": migration.version,
                "name": migration.name,
                "checksum": migration.checksum,
                "applied_at": time.time(),
            },
        )
        conn.execute(Q.commit)
    except BaseException:
        if conn.in_transaction:
            conn.execute(Q.rollback)
        raise
