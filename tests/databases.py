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
where migrating a new file costs 20 to 350 ms); a PostgreSQL one is a schema of the
process's pool (``migrated_schema``): migrated once, then emptied back to what the
migrations left after every test that used it (its tables truncated and refilled, its
sequences set back, from a template schema), about a fifth of the CPU of a new schema
migrated and dropped.  A schema whose definition a test changed is dropped, not reused.
So a test that takes migrated databases may write anything into them, but one that
creates, migrates or alters a schema takes ``new_url`` (a new, empty one).

Not a test module; imported as ``import databases`` (tests/ is on ``sys.path``).
"""

from __future__ import annotations

import atexit
import itertools
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
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


class Databases:
    """``new()`` -> the URL of a new, empty database of ``kind``, each call another one,
    removed at the end of the test; ``with new.one() as url:`` one given back at the end
    of the block instead (a pooled PostgreSQL schema is the next one's: a test that uses
    a database per hypothesis example takes one per example, as test_stateful.py does).

    A file in ``folder``, or a schema on the PostgreSQL server ``server()`` names (asked
    for only when needed).  ``migrated``: it holds sqlq's current schema already (a copy
    of ``migrated_sqlite_file()``, a schema of ``migrated_schema``)."""

    def __init__(
        self, kind: str, folder: Path, server: Callable[[], str], migrated: bool, stack: ExitStack
    ) -> None:
        self.kind, self.folder, self.server, self.migrated = kind, folder, server, migrated
        self.stack = stack
        self.numbers = itertools.count()

    def __call__(self) -> str:
        return self.stack.enter_context(self.one())

    @contextmanager
    def one(self) -> Iterator[str]:
        if self.kind == "sqlite":
            path = self.folder / f"q{next(self.numbers)}.db"
            if self.migrated:
                shutil.copyfile(migrated_sqlite_file(), path)
            yield f"sqlite:///{path}"  # removed with the test's tmp_path
            return
        schema = migrated_schema if self.migrated else fresh_schema
        with schema(self.server()) as url:
            yield url


@contextmanager
def fresh_databases(
    kind: str, folder: Path, server: Callable[[], str], *, migrated: bool = False
) -> Iterator[Databases]:
    """A Databases of ``kind`` for one test: all are removed at the end."""
    with ExitStack() as stack:
        yield Databases(kind, folder, server, migrated, stack)


@contextmanager
def fresh_schema(server_url: str) -> Iterator[str]:
    """A URL on ``server_url``'s database whose connections all use a new, empty schema."""
    schema = f"sqlq_t{secrets.token_hex(6)}"
    admin = sa.create_engine(server_url, poolclass=sa.pool.NullPool)
    try:
        with admin.begin() as connection:
            connection.exec_driver_sql(f"CREATE SCHEMA {schema}")
        try:
            yield schema_url(server_url, schema)
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


#: Which version of each catalog row that defines a schema's objects is there, as one
#: digest: its relations, columns, defaults, indexes, constraints, triggers, functions,
#: views (rules), sequences' settings and types.  DDL that creates, alters or drops any of
#: them writes a new row version (a new xmin), so the digest changes; reading and writing
#: rows, setval, VACUUM and ANALYZE (which update pg_class in place) leave it as it was.
SCHEMA_DEFINITION = """
SELECT md5(string_agg(part, ',' ORDER BY part)) FROM (
    SELECT 'c' || c.oid || ':' || c.xmin AS part FROM pg_class c
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'a' || a.attrelid || '.' || a.attnum || ':' || a.xmin
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'd' || d.oid || ':' || d.xmin FROM pg_attrdef d JOIN pg_class c ON c.oid = d.adrelid
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'i' || i.indexrelid || ':' || i.xmin
      FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'k' || k.oid || ':' || k.xmin FROM pg_constraint k
     WHERE k.connamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 't' || t.oid || ':' || t.xmin FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'p' || p.oid || ':' || p.xmin FROM pg_proc p
     WHERE p.pronamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'r' || r.oid || ':' || r.xmin FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 's' || q.seqrelid || ':' || q.xmin
      FROM pg_sequence q JOIN pg_class c ON c.oid = q.seqrelid
     WHERE c.relnamespace = current_schema()::regnamespace
    UNION ALL
    SELECT 'y' || y.oid || ':' || y.xmin FROM pg_type y
     WHERE y.typnamespace = current_schema()::regnamespace
) AS parts
"""


@dataclass
class SchemaPool:
    """The migrated schemas of one PostgreSQL server in this process: ``template``, as
    the migrations left it (never given to a test), and the ``free`` ones, each emptied
    back to the template's contents."""

    server_url: str
    template: str
    tables: list[str]
    filled: list[str]  # the tables the migrations put rows in
    sequences: list[tuple[str, int, int | None]]  # name, start value, last value
    free: list[str] = field(default_factory=list)
    #: Each schema's SCHEMA_DEFINITION as the migrations left it.
    definitions: dict[str, str] = field(default_factory=dict)
    #: The engine of ``connection``, made at its first use: one connection kept open
    #: for the process, not a new one per test (a server process forked per reset).
    admin: sa.Engine | None = None

    def new_schema(self) -> str:
        """A new schema that sqlq's migrations made (as the test's first queue would)."""
        import sqlq

        schema = f"sqlq_m{secrets.token_hex(6)}"
        with self.connection(schema) as run:
            run(f"CREATE SCHEMA {schema}")
        sqlq.Queue(schema_url(self.server_url, schema), lease_seconds=1, max_attempts=1).close()
        with self.connection(schema) as run:
            self.definitions[schema] = str(run(SCHEMA_DEFINITION).scalar())
        return schema

    @contextmanager
    def connection(self, schema: str) -> Iterator[Callable[..., Any]]:
        """``run(sql)`` in one transaction on the server, ``schema`` alone on the path."""
        if self.admin is None:  # pre_ping: the server may have been restarted meanwhile
            self.admin = sa.create_engine(self.server_url, pool_size=1, pool_pre_ping=True)
        with self.admin.begin() as connection:
            run = connection.exec_driver_sql
            run(f"SET LOCAL lock_timeout = '{DROP_LOCK_TIMEOUT}'; SET LOCAL search_path = {schema}")
            yield run

    def reset(self, schema: str) -> bool:
        """Put the template's contents back into ``schema`` and say True; or drop it and
        say False where a test changed its definition (SCHEMA_DEFINITION), or putting
        them back failed.  A connection the test left open in a transaction on it fails
        this, as it fails the drop (DROP_LOCK_TIMEOUT)."""
        try:
            with self.connection(schema) as run:
                if run(SCHEMA_DEFINITION).scalar() != self.definitions[schema]:
                    raise LookupError(f"{schema} changed")
                # small tables: DELETE is cheaper than TRUNCATE's new files; all in one
                # round trip (statements without parameters)
                statements = [f"DELETE FROM {table}" for table in self.tables]
                statements += [
                    f"INSERT INTO {table} SELECT * FROM {self.template}.{table}"
                    for table in self.filled
                ]
                for name, start, last in self.sequences:
                    value, called = (start, False) if last is None else (last, True)
                    statements.append(f"SELECT setval('{schema}.{name}', {value}, {called})")
                run(";\n".join(statements))
            return True
        except (LookupError, sa.exc.DBAPIError):
            del self.definitions[schema]
            with self.connection(schema) as run:
                run(f"DROP SCHEMA {schema} CASCADE")
            return False

    def drop_all(self) -> None:
        """Drop the template and the free schemas (at exit: best effort, as the
        throwaway server may be gone already)."""
        with suppress(Exception), self.connection("public") as run:
            for schema in [self.template, *self.free]:
                run(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        if self.admin is not None:
            self.admin.dispose()


_pools: dict[str, SchemaPool] = {}


def schema_url(server_url: str, schema: str) -> str:
    """A URL on ``server_url``'s database whose connections all use ``schema``."""
    url = sa.make_url(server_url).update_query_dict({"options": f"-csearch_path={schema}"})
    return url.render_as_string(hide_password=False)


def schema_pool(server_url: str) -> SchemaPool:
    """This process's SchemaPool of ``server_url``, made (its template migrated) at the
    first call."""
    if server_url not in _pools:
        pool = SchemaPool(server_url, "", [], [], [])
        template = pool.new_schema()
        with pool.connection(template) as run:
            tables = list(
                run(
                    "SELECT relname FROM pg_class WHERE relkind = 'r' "
                    "AND relnamespace = current_schema()::regnamespace ORDER BY relname"
                ).scalars()
            )
            filled = [t for t in tables if run(f"SELECT EXISTS (SELECT FROM {t})").scalar()]
            sequences = list(
                run(
                    "SELECT sequencename, start_value, last_value FROM pg_sequences "
                    "WHERE schemaname = current_schema() ORDER BY sequencename"
                ).all()
            )
        pool.template, pool.tables, pool.filled, pool.sequences = (
            template,
            tables,
            filled,
            sequences,
        )
        _pools[server_url] = pool
        atexit.register(pool.drop_all)
    return _pools[server_url]


@contextmanager
def migrated_schema(server_url: str) -> Iterator[str]:
    """A URL on ``server_url``'s database whose connections all use a schema that holds
    sqlq's current schema and no task (SchemaPool: a free one of this process, else a new
    one migrated); afterwards emptied back and freed for the next test."""
    pool = schema_pool(server_url)
    schema = pool.free.pop() if pool.free else pool.new_schema()
    yield schema_url(server_url, schema)
    if pool.reset(schema):
        pool.free.append(schema)
