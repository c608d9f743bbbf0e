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

Not a test module; imported as ``import databases`` (tests/ is on ``sys.path``).
"""

from __future__ import annotations

import itertools
import secrets
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
    kind: str, folder: Path, server: Callable[[], str]
) -> Iterator[Callable[[], str]]:
    """``new()`` -> the URL of a new, empty database of ``kind``, each call another one:
    a file in ``folder``, or a schema on the PostgreSQL server ``server()`` names (asked
    for only when needed).  All are removed at the end."""
    with ExitStack() as stack:
        numbers = itertools.count()

        def new() -> str:
            if kind == "sqlite":
                return f"sqlite:///{folder / f'q{next(numbers)}.db'}"
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
