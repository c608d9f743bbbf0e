"""Probing sqlq on PostgreSQL as a new user and as an attacker would: each test is a
problem found that way (a misleading message, a password shown, a raw driver error, a
task in the wrong place, a README claim the command line could not keep).

Each was fixed in sqlq/postgresql/, sqlq/cli/ or sqlq/backends.py.  Each test runs in a
schema of its own on the test server (conftest's ``postgres_url``).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import databases
import pytest
import sqlalchemy as sa

import sqlq
from sqlq.errors import InvalidConfig, SqlqError

SECRET = "s3cret-Pw"


@pytest.fixture
def pg(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty schema on the test server (dropped afterwards)."""
    with databases.fresh_schema(postgres_url) as url:
        yield url


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sqlq", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _missing_database(postgres_url: str, **query: str) -> str:
    """A URL on the test server naming a database that does not exist."""
    url = sa.make_url(postgres_url).set(database="sqlq_no_such_database")
    return url.update_query_dict(query).render_as_string(hide_password=False)


# --- passwords and messages -----------------------------------------------------------


def test_a_password_given_in_the_urls_query_is_never_shown(postgres_url: str, pg: str) -> None:
    """libpq takes the password as a query parameter too (``?password=``): neither the
    library's errors nor the command line's output may show it."""
    url = _missing_database(postgres_url, password=SECRET)
    with pytest.raises(SqlqError) as caught:
        sqlq.Queue(url, lease_seconds=10, max_attempts=1)
    assert SECRET not in str(caught.value)
    for command in ("stats", "migrate"):
        done = _cli(command, url)
        assert done.returncode != 0 and "sqlq_no_such_database" in done.stderr
        assert SECRET not in done.stdout + done.stderr, command
    # The test server trusts its local users: the password is sent, and not needed.
    working = sa.make_url(pg).update_query_dict({"password": SECRET})
    done = _cli("migrate", working.render_as_string(hide_password=False))
    assert done.returncode == 0 and "schema version" in done.stdout
    assert SECRET not in done.stdout + done.stderr


def test_a_connection_that_never_opened_is_not_said_to_be_lost(postgres_url: str) -> None:
    """A database that does not exist: the message says sqlq could not connect (the
    server's reason after it), not that a connection was lost."""
    with pytest.raises(sqlq.errors.Unavailable) as caught:
        sqlq.Queue(_missing_database(postgres_url), lease_seconds=10, max_attempts=1)
    message = str(caught.value)
    assert "could not connect" in message and "lost the connection" not in message
    assert 'database "sqlq_no_such_database" does not exist' in message


def test_a_url_whose_port_is_not_a_number_is_invalid_config() -> None:
    url = f"postgresql://app:{SECRET}@db.internal:54x2/app"
    with pytest.raises(InvalidConfig) as caught:
        sqlq.Queue(url, lease_seconds=10, max_attempts=1)
    assert SECRET not in str(caught.value)


def test_a_url_that_cannot_be_parsed_is_refused_without_its_password() -> None:
    with pytest.raises(InvalidConfig) as caught:
        sqlq.Queue(f"postgres ql://app:{SECRET}@db/app", lease_seconds=10, max_attempts=1)
    assert SECRET not in str(caught.value)


def test_the_command_line_calls_a_server_neither_sqlite_nor_a_file(pg: str) -> None:
    migrated = _cli("migrate", pg)
    assert migrated.returncode == 0, migrated.stderr
    assert "file" not in migrated.stdout
    stats = _cli("stats", pg)
    assert stats.returncode == 0, stats.stderr
    assert "sqlite:" not in stats.stdout and "PostgreSQL" in stats.stdout


# --- transactional enqueue ------------------------------------------------------------


def test_an_add_in_the_callers_transaction_goes_to_the_queues_own_schema(
    postgres_url: str,
) -> None:
    with (
        databases.fresh_schema(postgres_url) as mine,
        databases.fresh_schema(postgres_url) as other,
        sqlq.Queue(mine, lease_seconds=10, max_attempts=1) as queue,
        sqlq.Queue(other, lease_seconds=10, max_attempts=1) as elsewhere,
    ):
        other_schema = sa.make_url(other).query["options"].split("=", 1)[1]
        refused = False  # refusing the call would do too; landing elsewhere would not
        try:
            with queue.engine.begin() as conn:
                conn.exec_driver_sql(f"SET LOCAL search_path = {other_schema}")
                queue.add("order-1", conn=conn)
        except SqlqError:
            refused = True
        assert elsewhere.info("order-1") is None
        assert refused or queue.info("order-1") is not None


# --- the worker behind a pooler ------------------------------------------------------


def test_sqlq_worker_runs_without_listen_behind_a_pooler(pg: str, tmp_path: Path) -> None:
    """The README tells users behind pgbouncer in transaction mode to open the queue
    with listen=False: ``sqlq worker`` must be able to."""
    (tmp_path / "probe_tasks.py").write_text(
        "import sqlq\n\ntasks = sqlq.Tasks()\n\n\n@tasks.task\ndef noop() -> None:\n    pass\n"
    )
    with sqlq.Queue(pg, lease_seconds=10, max_attempts=1) as queue:
        queue.add("t1", name="probe_tasks.noop")
        done = _cli("worker", pg, "probe_tasks:tasks", "--no-listen", "--burst", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert queue.status("t1") == "COMPLETED"


# --- hostile texts on the operator's terminal ----------------------------------------


def test_an_error_text_cannot_send_control_characters_to_the_terminal(pg: str) -> None:
    """A handler's error may quote hostile input: list, dead and show print it with
    its control characters escaped (as they print ids), not as terminal commands."""
    hostile = "bad input \x1b[2J\x1b]0;owned\x07 and NUL \x00\nsecond line \x1b[31m"
    with sqlq.Queue(pg, lease_seconds=10, max_attempts=1) as queue:
        queue.add("t1")
        lease = queue.claim()
        assert lease is not None
        queue.fail("t1", token=lease.token, error=hostile)
    for command in (["list", pg], ["dead", pg], ["show", pg, "t1"]):
        done = _cli(*command)
        assert done.returncode == 0, done.stderr
        assert "bad input" in done.stdout
        assert not any(char in done.stdout for char in "\x1b\x07\x00"), command


def test_stats_prints_queue_names_with_control_characters_escaped(pg: str) -> None:
    with sqlq.Queue(pg, lease_seconds=10, max_attempts=1, queue="jobs\x1b[2J") as queue:
        queue.add("t1")
    done = _cli("stats", pg)
    assert done.returncode == 0, done.stderr
    assert "jobs" in done.stdout and "\x1b" not in done.stdout


# --- a schema of its own --------------------------------------------------------------


def test_a_search_path_naming_no_existing_schema_says_so(postgres_url: str) -> None:
    """The README's "schema of its own" URL before the schema is created: the message
    says what is missing, not PostgreSQL's "no schema has been selected to create in"."""
    url = sa.make_url(postgres_url).update_query_dict({"options": "-csearch_path=sqlq_absent"})
    target = url.render_as_string(hide_password=False)
    with pytest.raises(InvalidConfig) as caught:
        sqlq.Queue(target, lease_seconds=10, max_attempts=1)
    assert "CREATE SCHEMA" in str(caught.value)
    done = _cli("migrate", target)
    assert done.returncode == 2 and "CREATE SCHEMA" in done.stderr
    # The commands that read say the same, not "sqlq migrate creates them" (issue 23).
    for command in ("stats", "list", "workers"):
        done = _cli(command, target)
        assert done.returncode != 0 and "CREATE SCHEMA" in done.stderr, (command, done.stderr)
        assert "creates them" not in done.stderr, (command, done.stderr)


def test_a_foreign_table_with_another_of_sqlqs_names_is_refused_as_not_sqlqs(pg: str) -> None:
    engine = sa.create_engine(pg, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE sqlq_clock (reading text)")
    engine.dispose()
    with pytest.raises(sqlq.errors.NotASqlqDatabase):
        sqlq.Queue(pg, lease_seconds=10, max_attempts=1)


def test_a_foreign_sqlq_migrations_table_is_refused_as_not_sqlqs(pg: str) -> None:
    engine = sa.create_engine(pg, poolclass=sa.pool.NullPool)
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE sqlq_migrations (step text)")
    engine.dispose()
    with pytest.raises(sqlq.errors.NotASqlqDatabase, match="sqlq_migrations"):
        sqlq.Queue(pg, lease_seconds=10, max_attempts=1)
