"""The PostgreSQL server of a bench run, and a fresh schema for every measurement.

``SQLQ_BENCH_POSTGRES_URL`` set: the bench uses that server (the user's own).
Otherwise tests/postgres.py's ``server()`` gives it one: the test suite's server
when ``SQLQ_TEST_POSTGRES_URL`` names one, else a throwaway cluster (unix socket
only; under root it runs as postgres/nobody), started with real flushes:
``fsync`` on, so that ``synchronous_commit`` on/off is the FULL/NORMAL pair
(each system sets it on its own connections).

Every measurement gets a schema of its own (``sqlq_bench_<name>``), named in its
location's URL (``options=-csearch_path=...``): sqlq migrates into it, the raw
reference and procrastinate create their tables there, and ``drop`` removes it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa

URL_VARIABLE = "SQLQ_BENCH_POSTGRES_URL"
TESTS = Path(__file__).resolve().parents[1] / "tests"
#: What the throwaway cluster is started with: durability as a user's server has it.
SETTINGS = {"fsync": "on", "full_page_writes": "on"}
#: The settings RESULTS.md records.
SHOWN = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "wal_sync_method",
    "full_page_writes",
    "wal_level",
    "commit_delay",
    "shared_buffers",
    "work_mem",
    "max_connections",
    "max_wal_size",
    "checkpoint_timeout",
    "autovacuum",
    "jit",
)


def missing() -> str | None:
    """Why no server can be had here, or None."""
    tests = _test_server()
    if os.environ.get(URL_VARIABLE) or os.environ.get(tests.URL_VARIABLE):
        return None
    if tests.binary_folder() is None:
        return f"no PostgreSQL (initdb and postgres, or {URL_VARIABLE})"
    return None


def _test_server() -> Any:
    """tests/postgres.py (it imports tests/needs.py, a sibling)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    import postgres

    return postgres


@contextmanager
def server() -> Iterator[str]:
    """The server's SQLAlchemy URL (postgresql+psycopg://) while the run lasts."""
    url = os.environ.get(URL_VARIABLE)
    if url:
        yield _test_server().psycopg_url(url)
        return
    with _test_server().server(SETTINGS) as url:
        yield url


def settings(url: str) -> dict[str, str]:
    """SHOW of the settings RESULTS.md records, as the bench's connections see them."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0]) for name in SHOWN}


def conninfo(url: str, **options: str) -> str:
    """The libpq connection string of a SQLAlchemy URL, with ``-c name=value`` options."""
    parsed = sa.make_url(url)
    query = dict(parsed.query)
    extra = " ".join(f"-c{name}={value}" for name, value in options.items())
    if extra:
        query["options"] = f"{query.get('options', '')} {extra}".strip()
    params: dict[str, Any] = {
        "host": query.pop("host", parsed.host),
        "port": parsed.port,
        "user": parsed.username,
        "password": parsed.password,
        "dbname": parsed.database,
        **query,
    }
    return psycopg.conninfo.make_conninfo(
        **{key: value for key, value in params.items() if value is not None}
    )


def new_schema(url: str, name: str) -> str:
    """A new empty schema on the server; returns the URL whose connections use it."""
    schema = "sqlq_bench_" + re.sub(r"[^a-z0-9_]", "_", name.lower())
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
    return (
        sa.make_url(url)
        .update_query_dict({"options": f"-csearch_path={schema}"})
        .render_as_string(hide_password=False)
    )


def shown_url(url: str) -> str:
    """``url`` without its password, for the record ("" stays "")."""
    return url and sa.make_url(url).render_as_string(hide_password=True)


def schema_of(url: str) -> str:
    return sa.make_url(url).query["options"].removeprefix("-csearch_path=")  # type: ignore[union-attr]


def is_location(path: str) -> bool:
    return path.startswith("postgresql")


def drop(url: str) -> None:
    """Remove the schema of a location (and everything in it)."""
    with psycopg.connect(conninfo(url), autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema_of(url)} CASCADE")
