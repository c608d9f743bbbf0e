"""What is particular to the PostgreSQL backend: its migrations, its concurrency
(claims that pass over held rows, leases refused once they ran out even before
their expiry is applied, strict mode), the server's clock, text PostgreSQL cannot
hold, the views in the real ``psql`` shell, announcements of new tasks, fork.

The queue's contract itself runs on PostgreSQL in the conformance suite
(test_contract.py and the others parametrised by backend); these tests run
against the same real server (conftest's ``postgres_url``), each in a schema of
its own.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import databases
import psycopg
import pytest
import sqlalchemy as sa

import sqlq
from sqlq.backends import open_backend
from sqlq.errors import Busy, NotASqlqDatabase, SchemaTooNew, Unavailable
from sqlq.postgresql import migrate
from sqlq.postgresql.backend import MARK_LAG
from sqlq.schema import metadata
from sqlq.testing import ManualClock
from sqlq.worker import Worker, WorkerStats

LEASE = 10


@pytest.fixture
def pg(postgres_url: str) -> Iterator[str]:
    """The URL of a new, empty schema on the test server (dropped afterwards)."""
    with databases.fresh_schema(postgres_url) as url:
        yield url


def _admin(url: str) -> psycopg.Connection[Any]:
    """A psycopg connection (autocommit) on the database of ``url``, its options kept."""
    plain = sa.make_url(url).set(drivername="postgresql")
    return psycopg.connect(plain.render_as_string(hide_password=False), autocommit=True)


def _queue(url: str, **options: Any) -> sqlq.Queue:
    return sqlq.Queue(url, lease_seconds=LEASE, max_attempts=3, **options)


def _lock_key(queue: str = "default") -> str:
    """What another session runs to hold a queue's turn (the key of queries.sql)."""
    return f"hashtextextended(current_schema() || ':' || '{queue}', 0)"


# --- migrations -----------------------------------------------------------------------


def test_the_migrations_build_the_columns_and_indexes_of_the_sqlite_schema(pg: str) -> None:
    """The same table on both backends: the same columns (PostgreSQL adds
    payload_bytes, as it has no column of any type), nullability and indexes, but
    for three that only PostgreSQL has from its first migration on: the keys' (SQLite
    makes them at a file's first keyed add, on-demand migration 2; PostgreSQL's
    unique one is also what keeps two concurrent adds from both holding a key) and
    a line per group apart (SQLite's migration 13 made one index of the two lines)."""
    with _queue(pg) as q:
        inspector = sa.inspect(q.engine)
        columns = {c["name"]: c["nullable"] for c in inspector.get_columns("sqlq_tasks")}
        indexes = {
            i["name"]
            for i in inspector.get_indexes("sqlq_tasks")
            if not i.get("duplicates_constraint")  # UNIQUE (queue, task_id) is one
        }
    declared = metadata.tables["sqlq_tasks"]
    expected = {c.name: c.nullable for c in declared.columns} | {"payload_bytes": True}
    assert columns == expected
    postgresql_only = {"sqlq_tasks_group_line", "sqlq_tasks_key_holder", "sqlq_tasks_key_finished"}
    assert indexes == {i.name for i in declared.indexes} | postgresql_only


def test_migrations_are_recorded_with_their_checksums_and_run_once(pg: str) -> None:
    _queue(pg).close()
    _queue(pg).close()
    with _admin(pg) as conn:
        rows = conn.execute("SELECT version, name, checksum FROM sqlq_migrations").fetchall()
    assert rows == [(m.version, m.name, m.checksum) for m in migrate.migrations()]


#: The rows every PostgreSQL database made by sqlq holds in sqlq_migrations: once
#: released, a migration's text never changes (a database applied it as it was).
RELEASED = [
    (1, "initial", "ff33ca8c7c186ec372c44ed3c20062de7702788f6ca7b55eee4759b505df520d"),
    (2, "fewer_checks", "7904919bc0aa615790ba2bb2261b775b2e13b2525b1d34c5852b51e5101bd839"),
    (3, "schedules", "f87c11ec68a25bd81c056b2ec95c824cb81c0fa410e7c17f2e348fb6b4ff11e3"),
    (4, "cancel_pause", "13e0cf4da7c5cbdd5351b94a662f3c0a05a9caed4a4ef04b1ec9c8721bebde45"),
    (5, "results", "145116e469beb6d5558d67a683d1f3a81e033d88112a4347b23401f5dd7f0eee"),
    (6, "dedupe_keys", "dd2c2a8188b16e733f098709ab97c6c2c5cd83cfbf73f63e5d730a385183ca6f"),
    (7, "priorities", "0ade3fe2067c0d87affc7368078bfbbee31a8bf81520e8be04ce15baf054c569"),
    (8, "group_limits", "944f086f10f7d0f455c47c7037803b9752434116df94cd6208b378da85de51fd"),
    (9, "workers", "4fec59a597c32bc63eafa386f1f33d354b2af4e1e051c66817fe21f58f1b1bfc"),
    (
        10,
        "group_front_under_lock",
        "bf763b0dcda3ed9235e0827bc77c433d287a195f88b01dc2b2b6c640a94732f0",
    ),
    (11, "queue_settings", "2fd79da0a36c3ad2e9df77e3728147c9a6a2b60166a22b9640505c7435bedcb8"),
    (
        12,
        "readable_stats_times",
        "c5892d52637ceafe83f8cea9ed8c6e1bb8b539c8a82e62fa9840e30fa311ba86",
    ),
]


@pytest.mark.parametrize(
    "change",
    [
        "state = 'DONE'",
        "state = 'RESERVED', lease_id = 1",  # no deadline
        "run_at = 5",  # AVAILABLE with a wake-up time
        "finished_at = 5",  # not finished
    ],
)
def test_the_table_refuses_rows_the_indexes_and_due_probes_would_misread(
    pg: str, change: str
) -> None:
    """The CHECK constraints kept on PostgreSQL (migration 2 dropped the others: each
    costs server CPU in every write): the states, and the columns the partial indexes
    and the due probes read, set exactly in their states."""
    with _queue(pg) as q:
        q.add("t", 0)
    with _admin(pg) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(f"UPDATE sqlq_tasks SET {change} WHERE task_id = 't'")


def test_released_migrations_keep_their_checksums() -> None:
    shipped = [(m.version, m.name, m.checksum) for m in migrate.migrations()]
    assert shipped[: len(RELEASED)] == RELEASED


def _catalog(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The schema's tables, columns, constraints, indexes, views and triggers, as the
    server describes them (names of the schema itself left out)."""
    queries = {
        "columns": "SELECT table_name, column_name, data_type, is_nullable, column_default "
        "FROM information_schema.columns WHERE table_schema = current_schema()",
        "constraints": "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) "
        "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace",
        "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = current_schema()",
        "views": "SELECT viewname, definition FROM pg_views WHERE schemaname = current_schema()",
        "triggers": "SELECT event_object_table, trigger_name, action_statement "
        "FROM information_schema.triggers WHERE trigger_schema = current_schema()",
    }
    with _admin(url) as conn:
        (schema,) = conn.execute("SELECT current_schema()").fetchone()
        return {
            kind: sorted(
                tuple(str(v).replace(f"{schema}.", "") for v in row)
                for row in conn.execute(sql).fetchall()
            )
            for kind, sql in queries.items()
        }


def test_a_migrated_schema_equals_a_fresh_one(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema made at version 8 (before the worker registry) and migrated equals one
    made at the latest version, object for object."""
    with databases.fresh_schema(postgres_url) as old, databases.fresh_schema(postgres_url) as new:
        with monkeypatch.context() as m:
            before_workers = migrate.migrations()[:8]
            m.setattr(migrate, "migrations", lambda: before_workers)
            _queue(old).close()
        assert "sqlq_workers" not in {row[0] for row in _catalog(old)["columns"]}
        _queue(old).close()  # migrated to the latest
        _queue(new).close()
        assert _catalog(old) == _catalog(new)
        assert "sqlq_workers" in {row[0] for row in _catalog(new)["columns"]}


def _open_and_add(url: str, task_id: str) -> bool:
    with _queue(url) as q:
        return q.add(task_id)


def test_processes_opening_a_new_database_at_once_all_succeed(pg: str) -> None:
    """The migration runs under an advisory lock: the others wait, then find it done."""
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        added = pool.starmap(_open_and_add, [(pg, f"t{i}") for i in range(4)])
    assert added == [True] * 4
    with _admin(pg) as conn:
        (records,) = conn.execute("SELECT count(*) FROM sqlq_migrations").fetchone()
    assert records == migrate.latest_version()


def test_a_foreign_sqlq_tasks_table_is_refused_and_left_alone(pg: str) -> None:
    with _admin(pg) as conn:
        conn.execute("CREATE TABLE sqlq_tasks (mine integer)")
    with pytest.raises(NotASqlqDatabase, match="did not create"):
        _queue(pg)
    with _admin(pg) as conn:
        assert conn.execute("SELECT to_regclass('sqlq_migrations')").fetchone() == (None,)


def test_a_schema_newer_than_this_sqlq_is_refused(pg: str) -> None:
    _queue(pg).close()
    with _admin(pg) as conn:
        conn.execute("INSERT INTO sqlq_migrations VALUES (999, 'future', 'x', 0)")
    with pytest.raises(SchemaTooNew, match="upgrade sqlq"):
        _queue(pg)


# --- concurrency ----------------------------------------------------------------------


def test_a_lease_that_ran_out_is_refused_before_any_call_applied_its_expiry(pg: str) -> None:
    """Another session holds the queue's turn to apply due events, so the expiry is
    not applied; complete, fail, extend and release must still refuse the lease
    (deadline > now in each compare-and-set).  Once the turn is free, the next
    call applies the expiry: the attempt counts, the task is in line again."""
    q = _queue(pg)
    q.add("t", 0)
    lease = q.claim(1)
    assert lease is not None and lease.deadline == 1 + LEASE
    late = lease.deadline + 1
    with _admin(pg) as other:
        other.execute("BEGIN")
        other.execute(f"SELECT pg_advisory_xact_lock({_lock_key()})")
        assert q.complete("t", late, token=lease.token) is False
        assert q.fail("t", late, token=lease.token, error="late") is None
        assert q.extend("t", lease.token, late) is None
        assert q.release("t", lease.token, late) is False
        assert q.info("t", late).state == "RESERVED"  # nobody applied the expiry yet
        other.execute("COMMIT")
    info = q.info("t", late)
    assert (info.state, info.attempts, info.last_error) == ("AVAILABLE", 1, "lease expired")
    q.close()


def test_a_claim_passes_over_a_row_another_session_holds(pg: str) -> None:
    q = _queue(pg)
    q.add_many(["first", "second"], 0)
    with _admin(pg) as other:
        other.execute("BEGIN")
        other.execute("SELECT 1 FROM sqlq_tasks WHERE task_id = 'first' FOR UPDATE")
        lease = q.claim(1)
        assert lease is not None and lease.task_id == "second"
        other.execute("COMMIT")
    lease = q.claim(1)
    assert lease is not None and lease.task_id == "first"
    q.close()


def test_strict_mode_runs_a_queues_calls_one_at_a_time(pg: str) -> None:
    """strict=True: every call waits for the queue's turn (here held by another
    session past busy_timeout: Busy, with the driver's error as the cause); the
    default mode goes on without it."""
    strict = _queue(pg, strict=True, busy_timeout=0.2)
    relaxed = _queue(pg)
    with _admin(pg) as other:
        other.execute("BEGIN")
        other.execute(f"SELECT pg_advisory_xact_lock({_lock_key()})")
        with pytest.raises(Busy) as caught:
            strict.add("t", 0)
        assert isinstance(caught.value.__cause__, psycopg.errors.LockNotAvailable)
        assert relaxed.add("t", 0) is True
        other.execute("COMMIT")
    assert strict.reserve(1) == "t"
    strict.close()
    relaxed.close()


# --- time, text, views ----------------------------------------------------------------


def test_calls_without_a_time_take_the_servers_clock(pg: str) -> None:
    clock = ManualClock(start=1_000.0)
    with _queue(pg) as server, _queue(pg, clock=clock.time) as own:
        server.add("server")
        own.add("own")
        with _admin(pg) as conn:
            (now,) = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8").fetchone()
        created = server.info("server").created_at
        assert now - 5 < created <= now
        # A clock of the caller's behind the server's: the call runs at the mark,
        # which the server's time of earlier calls keeps at most MARK_LAG behind.
        assert created - MARK_LAG <= own.info("own").created_at <= created


def test_a_time_passed_in_ahead_of_the_server_raises_the_mark_for_every_call(pg: str) -> None:
    with _queue(pg) as q:
        ahead = 4e9  # far ahead of the server's clock (the year 2096)
        assert q.add("early", ahead) is True
        q.add("next")  # the server's clock is behind the mark: the call runs at the mark
        assert q.info("next").created_at == ahead


def test_a_call_at_the_servers_time_applies_what_fell_due_before_its_write(pg: str) -> None:
    """A call without a time folds the clock and the check for anything due into its
    write.  When a lease ran out and a wake-up came before the call's time, that
    write changes nothing: the call applies the due events first, in the order they
    fell due, then writes.  So the woken task and the expired one are in line ahead
    of a task added after both."""
    ahead = time.time() + 1000  # the server's time calls run at the mark, from here on
    with _queue(pg) as q:
        q.add("expired", ahead)
        lease = q.claim(ahead)  # runs out at ahead + LEASE
        assert lease is not None
        q.add("woken", ahead, delay=1)  # WAITING until ahead + 1
        with _admin(pg) as other:  # holds the queue's turn: nobody applies due events
            other.execute("BEGIN")
            other.execute(f"SELECT pg_advisory_xact_lock({_lock_key()})")
            q.add("marker", ahead + 2 * LEASE)  # the mark is now past both
            other.execute("COMMIT")
        assert q.add("new") is True  # at the mark, where both are due
        claimed = [q.claim() for _ in range(4)]
        assert [(c.task_id, c.attempt) for c in claimed if c] == [
            ("marker", 1),
            ("woken", 1),
            ("expired", 2),
            ("new", 1),
        ]
        assert q.complete("expired", token=lease.token) is False
        assert q.complete("expired", token=claimed[2].token) is True


def test_a_call_with_nothing_due_is_one_statement(pg: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An add, a heartbeat and a completion at the server's time are one statement
    each (the clock and the due check folded in, autocommit); a claim is its
    statement between BEGIN (sent with it) and COMMIT."""
    with _queue(pg) as q:
        q.add("warm")
        sent: list[str] = []
        execute = psycopg.Cursor.execute

        def counted(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(str(query).split(None, 1)[0])
            return execute(cursor, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counted)
        assert q.add("t") is True
        assert len(sent) == 1
        lease = q.claim()
        assert lease is not None and lease.task_id == "warm"
        assert sent[1:] == ["BEGIN", "WITH", "COMMIT"]
        del sent[:]
        assert q.extend("warm", lease.token) is not None
        assert q.complete("warm", token=lease.token) is True
        assert len(sent) == 2


def test_ids_with_nul_and_backslashes_are_distinct_and_readable_in_psql(pg: str) -> None:
    ids = ["nul\x00inside", "nul\\0inside", "back\\slash", "plain"]
    with _queue(pg) as q:
        assert q.add_many(ids, 0) == [True] * 4
        assert q.add("nul\x00inside", 0) is False
        assert [lease.task_id for lease in q.claim_many(4, 1)] == ids
    lines = _psql(pg, "SELECT task_id FROM sqlq_tasks ORDER BY id")
    assert lines == ["nul\\0inside", "nul\\\\0inside", "back\\\\slash", "plain"]


def test_the_views_answer_in_the_psql_shell(pg: str) -> None:
    with _queue(pg) as q:
        q.add_many(["a", "b", "c"], 0, max_attempts=1)
        q.claim(1)
        lease = q.claim(1)
        assert lease is not None
        q.fail(lease.task_id, 2, token=lease.token, error="boom")
    assert _psql(pg, "SELECT queue, available, reserved, dead FROM sqlq_queue_stats") == [
        "default|1|1|1"
    ]
    assert _psql(pg, "SELECT task_id, last_error FROM sqlq_dead_letters") == ["b|boom"]
    assert _psql(pg, "SELECT task_id, token FROM sqlq_leases") == ["a|4"]  # seqs 1-3 first


def test_queue_stats_shows_its_next_times_as_utc_text_in_psql(pg: str) -> None:
    """Migration 12: next_deadline_utc and next_run_at_utc, the same UTC text as
    SQLite's view gives (the millisecond, then whole seconds), in a session of
    another time zone; the Unix times stay in their columns; none where none."""
    at = 1_700_000_000.7
    with _queue(pg, clock=lambda: at) as q:
        q.add("now")
        q.add("later", delay=60.2999)  # due at ...60.9999: 22:14:21 to the millisecond
        assert q.reserve() is not None  # runs out at ...10.7 (LEASE): 22:13:30
    with _queue(pg, queue="quiet") as quiet:
        quiet.add("idle")
    shown = _psql(
        pg,
        "SET TIME ZONE 'America/New_York'; SELECT queue, next_deadline, next_run_at, "
        "next_deadline_utc, next_run_at_utc FROM sqlq_queue_stats ORDER BY queue",
    )
    assert [line for line in shown if line != "SET"] == [
        "default|1700000010.7|1700000060.9999|2023-11-14 22:13:30|2023-11-14 22:14:21",
        "quiet||||",
    ]


def _psql(url: str, sql: str) -> list[str]:
    psql = shutil.which("psql") or next(Path("/usr/lib/postgresql").glob("*/bin/psql"), None)
    assert psql is not None, "psql is part of the PostgreSQL install the tests use"
    plain = sa.make_url(url).set(drivername="postgresql")
    out = subprocess.run(
        [str(psql), "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql,
         plain.render_as_string(hide_password=False)],
        check=True, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return out.stdout.splitlines()


# --- announcements ----------------------------------------------------------------------


def test_new_tasks_are_announced_to_other_processes_queues(pg: str) -> None:
    heard = threading.Event()
    with _queue(pg) as q:
        cancel = q.on_new_tasks(heard.set)
        assert cancel is not None
        subprocess.run(
            [sys.executable, "-m", "sqlq", "add", pg, "from-another-process"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        assert heard.wait(30)
        cancel()
    with _queue(pg, listen=False) as q:
        assert q.on_new_tasks(heard.set) is None


def test_an_idle_worker_claims_an_announced_task_without_polling(pg: str) -> None:
    """The worker's clock never moves, so its idle pause never ends by time: only
    the announcement of the new task can wake it."""
    clock = ManualClock()
    handled = threading.Event()
    with _queue(pg) as q, _queue(pg) as other:
        worker = Worker(q, lambda payload: handled.set(), clock=clock)
        out: list[WorkerStats] = []
        thread = threading.Thread(target=lambda: out.append(worker.run()))
        thread.start()
        try:
            clock.wait_for_sleepers(2)  # idle: the claim loop and the monitor wait
            other.add("new")
            assert handled.wait(30)
        finally:  # a worker left running would keep the test process alive
            worker.stop()
            thread.join(30)
    assert out == [WorkerStats(claimed=1, completed=1)]


# --- fork -------------------------------------------------------------------------------


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents(pg: str) -> None:
    """The child uses the Queue it inherited (on a new connection) and exits; the
    parent's session is untouched and its next calls work."""
    q = _queue(pg)
    q.add("before", 0)
    pid = os.fork()
    if pid == 0:  # the child: add, then leave at once
        code = 0 if q.add("from-child", 1) else 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [q.reserve(2), q.reserve(2)] == ["before", "from-child"]
    q.close()


def test_a_process_frozen_inside_a_call_lets_go_of_its_rows_after_the_idle_limit(
    pg: str,
) -> None:
    """A call's transaction left open between two statements (the process frozen,
    here simply not going on) holds the row it claimed; the server ends that
    session after idle_in_transaction_session_timeout, and the task is claimable
    again (the claim never committed)."""
    with _queue(pg) as q:
        q.add("t", 0)
    frozen = open_backend(pg, busy_timeout=0.1)
    call = frozen.transaction(None, "default", None, lambda tx, asked: None)
    tx = call.__enter__()
    assert tx.claim("default", tx.now + LEASE) is not None
    with _queue(pg) as other:
        assert other.claim() is None  # held by the frozen call
        deadline = time.monotonic() + 60
        while (lease := other.claim()) is None:  # polling the state, with a deadline
            assert time.monotonic() < deadline, "the frozen call's session was never ended"
            time.sleep(0.2)
        assert lease.task_id == "t" and lease.attempt == 1
    with pytest.raises(Unavailable):
        call.__exit__(None, None, None)  # the process thaws: its session is gone
    frozen.close()


def test_a_task_failed_back_into_line_or_redriven_is_announced(pg: str) -> None:
    heard = threading.Event()
    with _queue(pg) as q, _queue(pg) as other:
        cancel = q.on_new_tasks(heard.set)
        assert cancel is not None
        q.add("retried", max_attempts=2)
        assert heard.wait(30)  # the add
        heard.clear()
        lease = other.claim()
        assert lease is not None and other.fail(lease.task_id, token=lease.token) == "AVAILABLE"
        assert heard.wait(30)  # back in line
        heard.clear()
        lease = other.claim()  # the second of its two attempts
        assert lease is not None and other.fail(lease.task_id, token=lease.token) == "DEAD"
        assert other.redrive() == 1
        assert heard.wait(30)  # redriven
        cancel()
