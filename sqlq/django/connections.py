"""Sharing Django's database: its settings as a sqlq URL, and a SQLAlchemy Connection on
the connection Django holds in a transaction (an add that commits with it)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

#: Keys of a PostgreSQL entry's OPTIONS that are Django's, not libpq's.
_DJANGO_PG_OPTIONS = {"isolation_level", "assume_role", "server_side_binding", "pool"}


def database_url(alias: str) -> str:
    """The sqlq URL of Django's database ``alias``: its SQLite file, or a
    postgresql+psycopg URL with the same server, database, user and libpq options."""
    try:
        db = connections.settings[alias]
    except Exception as exc:
        raise ImproperlyConfigured(f"sqlq: DATABASE {alias!r} is not in DATABASES") from exc
    engine = db["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        name = str(db["NAME"])
        if name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
            raise ImproperlyConfigured(
                f"sqlq: DATABASE {alias!r} is in memory; the queue needs a file that "
                "workers in other processes can open"
            )
        return name
    if engine == "django.db.backends.postgresql":
        query = {
            key: str(value)
            for key, value in (db.get("OPTIONS") or {}).items()
            if key not in _DJANGO_PG_OPTIONS
        }
        host = db.get("HOST") or None
        if host and host.startswith("/"):  # a unix socket folder
            query["host"], host = host, None
        port = db.get("PORT")
        return sa.URL.create(
            "postgresql+psycopg",
            username=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            host=host,
            port=int(port) if port else None,
            database=db.get("NAME") or None,
            query=query,
        ).render_as_string(hide_password=False)
    raise ImproperlyConfigured(
        f"sqlq: DATABASE {alias!r} uses {engine}; sqlq keeps its queue in SQLite or "
        "PostgreSQL (give a URL of one in OPTIONS['URL'] instead)"
    )


class _Kept:
    """The pool's stand-in for a dialect (see sqlalchemy.pool.Pool's ``dialect``): it
    never rolls back, commits or closes the borrowed connection."""

    is_async = False
    has_terminate = False

    def do_rollback(self, dbapi_connection: Any) -> None:
        pass

    do_commit = do_terminate = do_close = do_rollback

    def _do_ping_w_event(self, dbapi_connection: Any) -> bool:
        return True

    def get_driver_connection(self, connection: Any) -> Any:
        return connection


def _borrowed(raw: Any, url: str, sqlite_module: Any) -> sa.Connection:
    """A SQLAlchemy Connection on ``raw``, a DB-API connection Django holds in an open
    transaction, for sqlq's ``conn=``.  It never commits, rolls back or closes
    ``raw`` (the transaction and the connection stay Django's), nor sets it up as
    SQLAlchemy sets up its own (functions, notice handlers): its pool is made here,
    without the engine's connect events."""
    engine = sa.create_engine(
        url if sqlite_module is None else f"sqlite:///{url}",
        poolclass=sa.pool.NullPool,  # (replaced below; it never connects)
        **({} if sqlite_module is None else {"module": sqlite_module}),
    )
    engine.pool = sa.pool.StaticPool(
        lambda: raw,
        reset_on_return=None,
        dialect=_Kept(),  # type: ignore[arg-type]
    )
    dialect: Any = engine.dialect
    dialect.do_commit = dialect.do_rollback = dialect.do_close = _Kept.do_rollback.__get__(_Kept())
    conn = engine.connect()
    conn.begin()
    return conn
