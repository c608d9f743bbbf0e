"""Numbered schema migrations, applied in order when a queue is opened.

Migrations are the files ``NNNN_name.sql`` in the repository's
``migrations/sqlite/`` folder (the wheel carries them as
``sqlq/migrations/sqlite/``).  Each is applied in its own transaction together
with its row in ``sqlq_migrations``, so a database is always at exactly one
version.  Processes opening a database at once take a file lock
(``<database>.migrate-lock``) before migrating; the usual case, a database that
is already current, costs one query and takes no lock.

A file that is not a SQLite database, or is one without ``sqlq_migrations`` but
with other tables, or whose schema is newer than this library, is refused with a
:class:`sqlq.errors.SchemaError` before anything is written to it.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..errors import Busy, CannotOpen, NotASqlqDatabase, SchemaError, SchemaTooNew, StorageError
from .driver import dbapi
from .queries import Q

_FILE = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()

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


def migrations_dir() -> Path:
    here = Path(__file__).resolve().parent.parent  # the sqlq package
    for candidate in (here / "migrations" / "sqlite", here.parent / "migrations" / "sqlite"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("sqlq's migrations folder is missing from this installation")


@cache
def migrations() -> tuple[Migration, ...]:
    found = []
    for path in sorted(migrations_dir().iterdir()):
        match = _FILE.match(path.name)
        if match:
            found.append(Migration(int(match[1]), match[2], path.read_text("utf-8")))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1, 2, 3, ... without gaps: {versions}")
    return tuple(found)


def latest_version() -> int:
    return migrations()[-1].version


def applied_version(conn: Any, path: str) -> int:
    """The version of the database; 0 for an empty file.  Reads only."""
    names = {name for _, name in conn.execute(Q.list_objects)}
    if "sqlq_migrations" not in names:
        if any(not name.startswith("sqlite_") for name in names):
            raise NotASqlqDatabase(
                f"{path}: this SQLite database was not created by sqlq "
                "(it has tables but no sqlq_migrations); refusing to touch it"
            )
        return 0
    version: int = conn.execute(Q.applied_version).fetchone()[0]
    return version


def ensure_schema(conn: Any, path: str, mode: int = 0o600, busy_timeout: float = 30.0) -> int:
    """Bring the database to the latest version; return that version.

    ``conn`` is a DB-API connection in autocommit mode (isolation_level=None).
    The migrate lock is waited for at most ``busy_timeout`` seconds (then Busy):
    a process frozen while migrating never makes others hang.
    """
    latest = latest_version()
    version = applied_version(conn, path)
    if version > latest:
        raise SchemaTooNew(
            f"{path}: the database is at schema version {version}, but this sqlq "
            f"knows versions up to {latest}; upgrade sqlq"
        )
    if version < latest:
        lock = FileLock(path + ".migrate-lock", mode=mode)
        try:
            lock.acquire(timeout=busy_timeout)
        except Timeout:
            raise Busy(
                f"{path}.migrate-lock: not free within busy_timeout ({busy_timeout:g} s): "
                "another process is migrating the schema, or froze while migrating"
            ) from None
        except OSError as exc:
            raise CannotOpen(
                f"{path}: cannot take {path}.migrate-lock to migrate the schema "
                f"({exc.strerror or exc})"
            ) from exc
        try:
            version = applied_version(conn, path)  # another process may have migrated
            if version == 0:
                _enable_wal(conn, path)
            for migration in migrations()[version:]:
                _apply(conn, migration)
        finally:
            lock.release()
    _enable_wal(conn, path)
    return latest


def check_schema(
    conn: Any,
    path: str,
    *,
    allow_older: bool = False,
    older_hint: str = "opening it with sqlq.Queue migrates it to the current version",
) -> int:
    """The version of a sqlq database; refuses (without writing) any other file, a
    newer schema, and an older one unless ``allow_older``."""
    version = applied_version(conn, path)
    if version == 0:
        raise NotASqlqDatabase(f"{path}: not a sqlq database (it has no sqlq tables)")
    if version > latest_version():
        raise SchemaTooNew(
            f"{path}: the database is at schema version {version}, but this sqlq "
            f"knows versions up to {latest_version()}; upgrade sqlq"
        )
    if version < latest_version() and not allow_older:
        raise SchemaError(
            f"{path}: the database is at schema version {version}, older than this "
            f"sqlq's {latest_version()}; {older_hint}"
        )
    return version


def _enable_wal(conn: Any, path: str) -> None:
    (mode,) = conn.execute(Q.enable_wal).fetchone()
    if str(mode).lower() != "wal":
        raise StorageError(f"{path}: could not switch the database to WAL mode (got {mode!r})")


def _apply(conn: Any, migration: Migration) -> None:
    conn.execute(Q.begin_write)
    try:
        conn.execute(Q.create_migrations_table)
        for statement in migration.statements():
            conn.execute(statement)
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
