"""Which backend stores a queue, chosen by the scheme of its database's URL.

* A plain path (or ``os.PathLike``) or a ``sqlite:///path`` URL: SQLite.
* ``postgresql://...`` (or ``postgresql+psycopg://``): PostgreSQL, through psycopg 3
  (``pip install 'sqlq-queue[postgresql]'``).

The registry is the one module above the backends that names them; each backend
is imported only when a database of its kind is opened.  Options a Queue does not
take itself pass through to the backend, which validates their values; names
a backend does not take are refused here.  ``migrate=False`` opens a database as
it is, for inspection and maintenance (see sqlq.backend).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import InvalidConfig

if TYPE_CHECKING:
    from .backend import Backend


def _open_sqlite(location: str | os.PathLike[str], **options: Any) -> Backend:
    from .sqlite.backend import SqliteBackend

    return SqliteBackend(location, **options)


def _open_postgresql(url: str, **options: Any) -> Backend:
    from .postgresql.backend import PostgresBackend

    return PostgresBackend(url, **options)


def _sqlite_file(location: str | os.PathLike[str]) -> str:
    from .sqlite.paths import database_path

    return database_path(location)


class Kind(NamedTuple):
    """A kind of database: how to open it, and the options it takes."""

    example: str
    #: None: not available yet.
    open: Callable[..., Backend] | None
    options: frozenset[str] = frozenset()
    #: The file a location names, for a kind that keeps a database in one (else None).
    file: Callable[[str | os.PathLike[str]], str] | None = None


#: The backends by URL scheme (SQLAlchemy's backend name, before any ``+driver``).
KINDS = {
    "sqlite": Kind(
        "sqlite:///path (or a plain path)",
        _open_sqlite,
        frozenset({"synchronous", "busy_timeout", "file_mode", "migrate", "force_migration"}),
        _sqlite_file,
    ),
    "postgresql": Kind(
        "postgresql://user@host/db",
        _open_postgresql,
        frozenset(
            {"strict", "synchronous", "busy_timeout", "listen", "migrate", "force_migration"}
        ),
    ),
}


def _scheme(path_or_url: object) -> str:
    """The kind of database a path or URL names: ``sqlite`` for a plain path."""
    if not isinstance(path_or_url, str) or "://" not in path_or_url:
        return "sqlite"  # a path; SQLite refuses what is not one
    import sqlalchemy as sa  # a URL: SQLAlchemy reads it (and will open it)

    try:
        return sa.engine.make_url(path_or_url).get_backend_name()
    except (sa.exc.ArgumentError, ValueError) as exc:  # ValueError: a port not a number
        # Not the URL itself in the message: it may hold a password.
        scheme = path_or_url.split("://", 1)[0]
        raise InvalidConfig(
            f"not a database URL ({scheme}://...): {type(exc).__name__}: "
            f"{str(exc).replace(path_or_url, '<the URL>')}"
        ) from exc


def open_backend(path_or_url: str | os.PathLike[str], **options: Any) -> Backend:
    """Open the database a path or URL names, with its backend's ``options``."""
    name = _scheme(path_or_url)
    kind = KINDS.get(name)
    if kind is None:
        supported = "; ".join(k.example for k in KINDS.values())
        raise InvalidConfig(f"{name!r} databases are not supported; sqlq knows {supported}")
    if kind.open is None:
        raise InvalidConfig(
            f"{name} databases are not available yet in this version of sqlq; "
            "use a SQLite file (a path or sqlite:///path)"
        )
    unknown = sorted(set(options) - kind.options)
    if unknown:
        raise InvalidConfig(
            f"unknown option {', '.join(map(repr, unknown))} for a {name} database "
            f"(its options: {', '.join(sorted(kind.options)) or 'none'})"
        )
    return kind.open(path_or_url, **options)


def database_file(path_or_url: str | os.PathLike[str]) -> str | None:
    """The file a path or URL names, as its backend opens it (for SQLite the real path),
    or None for a database on a server (and for a URL open_backend refuses)."""
    kind = KINDS.get(_scheme(path_or_url))
    return None if kind is None or kind.file is None else kind.file(path_or_url)


def sqlite_dbapi() -> Any:
    """The DB-API module sqlq's SQLite backend opens its files with (pysqlite3 where it
    is installed, else the standard library's sqlite3): a program that shares a file's
    connections with sqlq (sqlq.django) must use the same library, whose locks it sees."""
    from .sqlite.driver import dbapi

    return dbapi
