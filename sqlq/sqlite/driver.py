"""The DB-API module behind SQLAlchemy's pysqlite dialect, and the error boundary.

sqlq prefers ``pysqlite3`` (a current SQLite, 3.53 in 0.6.1) and falls back to the
standard library's ``sqlite3``, warning when that SQLite carries the WAL-reset
bug: before 3.51.3 (3.50.7 and 3.44.6 carry the fix too), connections that write
and checkpoint at the same time can corrupt the database, which is exactly what
several worker processes do.
"""

from __future__ import annotations

import functools
import warnings
from types import ModuleType
from typing import Any

from .. import errors
from .files import describe_problem

try:  # pragma: no cover - which branch runs depends on the platform
    import pysqlite3.dbapi2 as _dbapi
except ImportError:  # pragma: no cover
    import sqlite3 as _dbapi

dbapi: ModuleType = _dbapi

#: How sqlq's own connections turn stored TEXT into str.  The default raises on
#: bytes that are not UTF-8 (only an outside edit can store them), and then no
#: call could read past that row: every claim would fail.  With surrogateescape
#: the bad bytes come back as lone surrogates, which sqlq refuses as it refuses
#: them on input (a payload is then dead-lettered as undecodable, never stuck).
stored_text = functools.partial(str, encoding="utf-8", errors="surrogateescape")

# The DB-API module binds int, float, str and bytearray parameters directly, but
# sends None and bytes through its adaptation protocol first, which fails (an
# AttributeError raised and cleared for __adapt__ and __conform__ each, several
# microseconds) before they are bound as they are.  An adapter that returns the
# value unchanged binds them the same way, minus the failed look-ups.  Registering
# adapters for these two types does not turn on adaptation for the base types.
dbapi.register_adapter(type(None), lambda value: value)
dbapi.register_adapter(bytes, lambda value: value)


class SqliteVersionWarning(UserWarning):
    """The SQLite library in use has a known bug that can corrupt a shared database."""


def version_info(module: ModuleType | None = None) -> tuple[int, int, int]:
    major, minor, patch, *_ = (*map(int, (module or dbapi).sqlite_version.split(".")), 0, 0)
    return (major, minor, patch)


def has_wal_reset_bug(version: tuple[int, int, int]) -> bool:
    """True for SQLite versions affected by the WAL-reset corruption bug."""
    if version >= (3, 51, 3):
        return False
    fixed_backports = ((3, 50, 7), (3, 44, 6))
    return not any(fix <= version < (fix[0], fix[1] + 1, 0) for fix in fixed_backports)


def describe() -> str:
    """'SQLite 3.53.4 (pysqlite3)': what `sqlq stats` shows."""
    return f"SQLite {dbapi.sqlite_version} ({dbapi.__name__.split('.')[0]})"


def warn_if_affected() -> None:
    if has_wal_reset_bug(version_info()):
        warnings.warn(
            f"{describe()} has the WAL-reset bug (fixed in 3.51.3): several processes "
            "writing one database can corrupt it. Install pysqlite3>=0.6.1 or a newer "
            "Python whose sqlite3 links SQLite 3.51.3 or later.",
            SqliteVersionWarning,
            stacklevel=3,
        )


# Primary result codes (https://sqlite.org/rescode.html) -> sqlq error types.
_BY_CODE: dict[int, type[errors.StorageError]] = {
    3: errors.ReadOnly,  # SQLITE_PERM
    5: errors.Busy,  # SQLITE_BUSY
    6: errors.Busy,  # SQLITE_LOCKED
    8: errors.ReadOnly,  # SQLITE_READONLY
    10: errors.StorageIOError,  # SQLITE_IOERR
    11: errors.Corrupt,  # SQLITE_CORRUPT
    13: errors.StorageFull,  # SQLITE_FULL
    14: errors.CannotOpen,  # SQLITE_CANTOPEN
    26: errors.NotASqlqDatabase,  # SQLITE_NOTADB
}


def is_busy(exc: BaseException) -> bool:
    """SQLITE_BUSY or SQLITE_LOCKED: another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)
    return "database is locked" in str(exc)


def translate(exc: BaseException, path: str) -> errors.StorageError:
    """The sqlq error for a DB-API exception; raise it ``from exc``."""
    code: Any = getattr(exc, "sqlite_errorcode", None)
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    kind = _BY_CODE.get(code & 0xFF, errors.StorageError) if isinstance(code, int) else None
    if kind is None:
        kind = errors.Busy if "database is locked" in str(exc) else errors.StorageError
    if kind is errors.Busy:
        return errors.Busy(
            f"{path}: the write lock was not free within busy_timeout ({name}: {exc})"
        )
    message = f"{path}: {exc} ({name})"
    if kind in (errors.ReadOnly, errors.CannotOpen):
        message += describe_problem(path)
    return kind(message)
