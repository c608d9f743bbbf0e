"""The durable backends the tests run on, and a fresh database of each kind for a test.

``DURABLE_KINDS`` names every kind of database a :class:`sqlq.Queue` can open in this
version of sqlq (sqlq.backends.KINDS with an ``open``): a test about the queue's contract
is parametrised over them (conftest.py's ``queue_url`` and ``make_queue``), so that one
suite checks every backend through the public API.

A fresh database is a new file for SQLite, and for PostgreSQL a new schema on the
session's server: ``fresh_schema`` creates ``sqlq_t<random>`` and yields the server's URL
with ``options=-csearch_path=<schema>``, so that every connection opened with it (the
queue's, a worker process's, the test's own) reads and writes that schema alone; the
schema is dropped with everything in it afterwards.

``fresh_databases(..., migrated=True)`` gives databases that hold sqlq's current schema
already (and no task), for the tests that only use a queue on them: a SQLite one is a
copy of a file migrated once per test process (``migrated_sqlite_file``: about 1 ms,
where migrating a new file costs 20 to 350 ms); a PostgreSQL one is still a new schema
that the first queue migrates (about 35 ms: a database made from a template costs more,
60 to 110 ms, and a schema cannot be copied).

Not a test module; imported as ``import databases`` (tests/ is on ``sys.path``).
"""

from __future__ import annotations

import atexit
import itertools
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from sqlq.backends import KINDS

#: The kinds of durable database, in the order the tests run them.
DURABLE_KINDS = [name for name, kind in KINDS.items() if kind.open is not None]

#: What a test's Queue takes besides the URL, per kind: SQLite's files need no
#: flush per commit in tests (tmp_path outlives no power cut).
QUEUE_OPTIONS: dict[str, dict[str, Any]] = {"sqlite": {"synchronous": "normal"}}

#: Parametrises a test that is about SQLite itself (its file, its write lock) with a
#: SQLite database only, where it stands among tests that run on every backend.
sqlite_only = pytest.mark.parametrize("new_url", ["sqlite"], indirect=True)


def kind(url: str) -> str:
    """The kind of database a URL names (a key of DURABLE_KINDS)."""
    return sa.make_url(url).get_backend_name()


def queue_options(url: str) -> dict[str, Any]:
    """QUEUE_OPTIONS for the database ``url`` names."""
    return QUEUE_OPTIONS.get(kind(url), {})


def cli_options(url: str) -> list[str]:
    """queue_options(url) as options of ``sqlq`` commands."""
    return [f"--{name.replace('_', '-')}={value}" for name, value in queue_options(url).items()]


def sqlite_path(url: str) -> str:
    """The file of a SQLite database's URL."""
    assert kind(url) == "sqlite", url
    return sa.make_url(url).database or ""


#: How long dropping a test's schema may wait for a lock: a connection the test left
#: open in a transaction fails the teardown, rather than hanging it.
DROP_LOCK_TIMEOUT = "10s"


@contextmanager
def fresh_databases(
    kind: str, folder: Path, server: Callable[[], str], *, migrated: bool = False
) -> Iterator[Callable[[], str]]:
    """``new()`` -> the URL of a new, empty database of ``kind``, each call another one:
    a file in ``folder``, or a schema on the PostgreSQL server ``server()`` names (asked
    for only when needed).  All are removed at the end.  ``migrated``: a SQLite file
    holds sqlq's current schema already (a copy of ``migrated_sqlite_file()``)."""
    with ExitStack() as stack:
        numbers = itertools.count()

        def new() -> str:
            if kind == "sqlite":
                path = folder / f"q{next(numbers)}.db"
                if migrated:
                    shutil.copyfile(migrated_sqlite_file(), path)
                return f"sqlite:///{path}"
            return stack.enter_context(fresh_schema(server()))

        yield new


@contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A URL on ``server_url``'s database whose connections all use a new, empty schema."""
    schema = f"sqlq_t{secrets.token_hex(6)}"
    admin = sa.create_engine(server_url, poolclass=sa.pool.NullPool)
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(f"CREATE SCHEMA {schema}")
        url = sa.make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
        try:
            yield url.render_as_string(hide_password=False)
        finally:
            with admin.begin() as connection:
                connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'")
                connection.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
    finally:
        admin.dispose()


_migrated: list[Path] = []


def migrated_sqlite_file() -> Path:
    """A SQLite file that sqlq created and migrated to its current schema, holding no
    task, made once per process (each xdist worker has its own) and removed at exit.
    Closed cleanly, it is one file (no -wal or -shm beside it), which a copy repeats."""
    if not _migrated:
        import sqlq

        folder = Path(tempfile.mkdtemp(prefix="sqlq-migrated-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        path = folder / "migrated.db"
        sqlq.Queue(path, lease_seconds=1, max_attempts=1, **QUEUE_OPTIONS["sqlite"]).close()
        assert not list(folder.glob("migrated.db-*")), folder  # no -wal, no -shm
        _migrated.append(path)
    return _migrated[0]
