"""What holds for SQLite alone: its file and URL forms, WAL and pragmas, the write lock
and Busy, SQLite libraries, processes migrating one new file, stored text that is not
UTF-8.  What every durable backend does is in test_durable.py."""

from __future__ import annotations

import multiprocessing
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
import sqlalchemy
from needs import need

import sqlq
from sqlq import payload
from sqlq.errors import Busy, CannotOpen, InvalidArgument, InvalidConfig
from sqlq.sqlite import driver
from sqlq.sqlite.queries import Q


def open_queue(path: Path, **kw: object) -> sqlq.Queue:
    kw.setdefault("lease_seconds", 10)
    kw.setdefault("max_attempts", 3)
    return sqlq.Queue(path, **kw)  # type: ignore[arg-type]


def test_snapshot_reads_the_stats_as_last_written_without_the_write_lock(db_path: Path) -> None:
    now = [1_000.0]
    q = open_queue(db_path, lease_seconds=10, clock=lambda: now[0], busy_timeout=0.1)
    q.add_many(["a", "b"])
    assert q.reserve() == "a"
    now[0] = 1_020.0  # a's lease ran out at 1010, but no call has applied it yet
    writer = driver.dbapi.connect(str(db_path), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(Busy):
            q.stats()
        snap = q.snapshot()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert snap.counts == {
        "WAITING": 0, "AVAILABLE": 1, "RESERVED": 1, "COMPLETED": 0, "DEAD": 0, "CANCELLED": 0
    }  # fmt: skip
    assert (snap.oldest_available_age, snap.next_deadline) == (20.0, 1_010.0)
    assert q.stats().counts["AVAILABLE"] == 2  # a call applies the expiry
    assert q.snapshot().counts["RESERVED"] == 0
    q.close()


def test_wal_mode_and_synchronous_setting(db_path: Path) -> None:
    q = open_queue(db_path)
    q.add("t", 0)
    q.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()
    for setting, expected in (("full", 2), ("normal", 1)):
        q = open_queue(db_path, synchronous=setting)
        conn = q._backend._connection()  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA synchronous").fetchone() == (expected,)
        q.close()
    with pytest.raises(InvalidConfig):
        open_queue(db_path, synchronous="off")


def test_hot_queries_use_indexes(db_path: Path) -> None:
    q = open_queue(db_path)
    q.close()
    with sqlite3.connect(db_path) as conn:

        def plan(sql: str, params: dict[str, object] | tuple[object, ...]) -> str:
            return " | ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))

        calls = ((Q.open_call, ("q", 5, 15)), (Q.open_plain_call, ("q", 5, 15)))
        for due in (plan(call, params) for call, params in (*calls, (Q.due_events, ("q", 5)))):
            assert "sqlq_tasks_leases" in due and "sqlq_tasks_waiting" in due
            assert "SCAN sqlq_tasks" not in due
        claim = plan(Q.claim_front, ("q",))
        assert "sqlq_tasks_line" in claim and "TEMP B-TREE" not in claim
        take = plan(Q.take_task, (1, 1, 1, 1))
        assert "INTEGER PRIMARY KEY" in take and "SCAN" not in take
        front_many = plan(Q.claim_front_many, ("q", 10))
        assert "sqlq_tasks_line" in front_many and "TEMP B-TREE" not in front_many
        take_front = plan(Q.take_front, ("q", 10, 1, 1, 1))
        assert "SCAN line" in take_front and "INTEGER PRIMARY KEY" in take_front
        assert "TEMP B-TREE" not in take_front and "SCAN sqlq_tasks" not in take_front
        get = plan(Q.get_task, {"queue": "q", "task_id": "t"})
        assert "USING INDEX" in get and "SCAN" not in get
        for complete in (
            plan(Q.complete_task, ("q", "t", 1, 1)),
            plan(Q.complete_task_with_result, ("q", "t", 1, 1, "1")),
        ):
            assert "USING INDEX" in complete and "SCAN" not in complete
        assert "sqlq_groups_live" in plan(Q.open_call, ("q", 5, 15))
        assert "sqlq_groups_live" in plan(Q.queue_flags, ("q",))
        for fair, groups in ((0, "sqlq_groups_by_head"), (1, "sqlq_groups_by_turn")):
            grouped = plan(Q.claim_grouped, ("q", 1, fair))
            assert groups in grouped and "sqlq_tasks_line" in grouped
            front = "sqlq_tasks_line (queue=? AND group_key=? AND line_key=? AND seq=?)"
            assert front in grouped
            assert "SCAN sqlq_" not in grouped
        ready = plan(Q.ready, {"queue": "q", "now": 1})
        assert "sqlq_groups_by_head" in ready and "SCAN sqlq_" not in ready
    conn.close()


def test_a_plain_add_writes_the_row_the_general_insert_writes(db_path: Path) -> None:
    """insert_plain_task (an AVAILABLE task of no group, priority 0) and insert_task
    with those values store the same row, column for column, for payloads and names
    given or not."""
    open_queue(db_path).close()
    conn = driver.dbapi.connect(db_path, isolation_level=None)
    cases = [("", ""), ('{"a": 1}', "send"), (b"\x00bytes", "")]
    for n, (body, name) in enumerate(cases):
        common = ("q", f"q-general-{n}", "AVAILABLE", 10 + n, 3, 0, body, "fixed", 1.5, 9.0,
                  1000.25 + n, name, 0, 42.0, "")  # fmt: skip
        conn.execute(Q.insert_task, common)
        plain = ("q", f"q-plain-{n}", 10 + n, 3, body, "fixed", 1.5, 9.0, 1000.25 + n, name,
                 42.0)  # fmt: skip
        conn.execute(Q.insert_plain_task, plain)
    cursor = conn.execute("SELECT * FROM sqlq_tasks WHERE queue = 'q' ORDER BY task_id")
    names = [d[0] for d in cursor.description]
    stored = {row[names.index("task_id")]: row for row in cursor.fetchall()}
    ignored = {names.index("id"), names.index("task_id")}
    assert len(stored) == 2 * len(cases)
    for n in range(len(cases)):
        general, plain = stored[f"q-general-{n}"], stored[f"q-plain-{n}"]
        assert [v for i, v in enumerate(general) if i not in ignored] == [
            v for i, v in enumerate(plain) if i not in ignored
        ]
    conn.close()


def test_statements_with_a_limit_are_not_planned_anew_at_each_execution(db_path: Path) -> None:
    """SQLite prepares a statement again when a parameter it read while planning is
    bound anew (a bare ``LIMIT :n``): the authorizer, which SQLite asks while it
    prepares, must not be asked at the second execution of any statement with a LIMIT.
    (Written ``LIMIT :n``, each would be parsed and planned at every execution.)"""
    open_queue(db_path).close()
    conn = driver.dbapi.connect(db_path, isolation_level=None)
    asked: list[int] = []

    def authorizer(*_: object) -> int:
        asked.append(1)
        return 0  # SQLITE_OK

    conn.set_authorizer(authorizer)
    limit = re.compile(r"LIMIT \+?[:?]([a-z_0-9]+)")
    # (These two are planned at every execution anyway, and should be: SQLite reads
    # their ``state = :state`` to know whether a partial index serves it.)
    anyway = {"list_tasks_in_state", "purge_batch"}
    limited = [n for n, query in Q.all.items() if limit.search(query.sql) and n not in anyway]
    assert "claim_front_many" in limited and "browse_newest" in limited
    conn.execute("BEGIN IMMEDIATE")
    for name in limited:
        sql = getattr(Q, name)
        named = sorted(set(re.findall(r"(?<!:):([a-z_]+)", sql)))
        numbered = max(map(int, re.findall(r"\?(\d+)", sql)), default=0)
        limits = set(limit.findall(sql))
        for value in (1, 2):  # the LIMIT's parameters bound anew, the others alike
            if named:
                params: object = {p: value if p in limits else 1 for p in named}
            else:
                params = tuple(value if str(k) in limits else 1 for k in range(1, numbered + 1))
            asked.clear()
            conn.execute(sql, params).fetchall()
        assert asked == [], f"{name} was prepared again"
    conn.execute("ROLLBACK")
    conn.close()


def test_a_connection_that_ran_many_statements_still_reuses_the_hot_ones(db_path: Path) -> None:
    """The queue's connection keeps its prepared statements however many others it
    ran before (migrations, listings, purges: the DB-API module's cache, once full,
    evicts the newest entry, so calls that alternate new statements would prepare
    each at every execution).  The authorizer, which SQLite asks while it prepares,
    is not asked in a second round of add, claim, heartbeat and completions."""
    q = open_queue(db_path)
    conn = q._backend._connection()  # type: ignore[attr-defined]
    for n in range(300):  # a long-lived process's one-off statements
        conn.execute(f"SELECT {n} FROM sqlq_clock").fetchall()
    asked: list[int] = []
    conn.set_authorizer(lambda *_: asked.append(1) or 0)

    def calls(n: int) -> None:
        q.add(f"a-{n}", 100 + n)
        lease = q.claim(100 + n)
        assert lease is not None
        q.extend(lease.task_id, lease.token, 100 + n)
        q.complete(lease.task_id, 100 + n, token=lease.token)
        q.settle_and_claim(2, 100 + n)

    calls(0)
    asked.clear()
    calls(1)
    assert asked == []
    q.close()


def test_claims_cost_the_same_with_statistics_taken_when_the_line_was_short(
    tmp_path: Path,
) -> None:
    """A user may ANALYZE the file (or PRAGMA optimize) when the queue is quiet; a
    claim's plan must not then read the whole line per task taken.  SQLite VM steps of
    claim_many(200) and claim() over 5,000 AVAILABLE tasks, counted on the queue's
    connection, with such statistics and with none.  (Measured on take_tasks, an
    UPDATE ... FROM json_each(ids) that left the join order to the planner: 150 times.)"""
    counts = {}
    for stats in ("none", "stale"):
        path = tmp_path / f"{stats}.db"
        open_queue(path).close()
        q = open_queue(path)
        q.add_many([f"few-{n}" for n in range(10)], 1)
        if stats == "stale":
            with sqlite3.connect(path) as conn:
                conn.execute("ANALYZE")
            conn.close()
            q.close()
            q = open_queue(path)  # a connection that reads the statistics
        q.add_many([f"burst-{n}" for n in range(5000)], 2)
        conn = q._backend._connection()  # type: ignore[attr-defined]
        steps = [0]

        def tick(steps: list[int] = steps) -> int:
            steps[0] += 1
            return 0

        conn.set_progress_handler(tick, 1)
        assert len(q.claim_many(200, 3)) == 200
        assert q.claim(3) is not None
        conn.set_progress_handler(None, 1)
        q.close()
        counts[stats] = steps[0]
    assert counts["stale"] < 2 * counts["none"], counts


def test_database_errors_become_typed_errors_with_the_cause(tmp_path: Path) -> None:
    with pytest.raises(CannotOpen, match=r"folder .* does not exist"):
        open_queue(tmp_path / "no" / "such" / "folder" / "q.db")
    assert not (tmp_path / "no").exists()
    (tmp_path / "a-folder.db").mkdir()
    with pytest.raises(CannotOpen) as opened:
        open_queue(tmp_path / "a-folder.db")
    assert isinstance(opened.value.__cause__, driver.dbapi.Error)


@pytest.mark.parametrize("bad", [":memory:", "", "sqlite://", "sqlite:///:memory:"])
def test_unshareable_or_unsupported_targets_are_refused(bad: str) -> None:
    with pytest.raises(InvalidConfig):
        open_queue(bad)  # type: ignore[arg-type]


def test_sqlite_url(tmp_path: Path) -> None:
    q = open_queue(f"sqlite:///{tmp_path}/via-url.db")  # type: ignore[arg-type]
    q.add("t", 0)
    q.close()
    assert (tmp_path / "via-url.db").exists()


def test_busy_database_raises_busy_after_the_wait(db_path: Path) -> None:
    q = open_queue(db_path, busy_timeout=0.2)
    q.add("t", 0)
    # The same SQLite library as the queue: two copies of SQLite in one process
    # do not see each other's POSIX locks.
    blocker = driver.dbapi.connect(str(db_path), isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(Busy, match="busy_timeout") as caught:
            q.reserve(1)
        assert isinstance(caught.value.__cause__, driver.dbapi.Error)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert q.reserve(1) == "t"  # the same object works once the lock is free
    q.close()


def _child_uses_inherited_queue(q: sqlq.Queue, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    out.put((q.reserve(1), q.complete("a", 1), os.getpid()))


def test_a_forked_child_opens_its_own_connection(db_path: Path) -> None:
    q = open_queue(db_path)
    q.add("a", 0)
    q.add("b", 0)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_uses_inherited_queue, args=(q, out))
    child.start()
    reserved, completed, pid = out.get(timeout=30)
    child.join(30)
    assert child.exitcode == 0 and pid != os.getpid()
    assert (reserved, completed) == ("a", True)
    # The parent reconnects on its next call (tests/test_fork.py has the rest).
    assert q.status("a", 2) == "COMPLETED"
    assert q.reserve(2) == "b"
    q.close()


def _open_and_add(path: str, name: str) -> None:
    q = sqlq.Queue(path, lease_seconds=5, max_attempts=2)
    q.add(name, 0)
    q.close()


def test_processes_opening_a_new_file_together_migrate_once(
    tmp_path: Path, migration_files: list[Path]
) -> None:
    path = str(tmp_path / "fresh.db")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_and_add, args=(path, f"p{i}")) for i in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 6
    with sqlite3.connect(path) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM sqlq_migrations ORDER BY 1")]
        assert versions == list(range(1, len(migration_files) + 1))  # each applied once
        assert conn.execute("SELECT count(*) FROM sqlq_tasks").fetchone() == (6,)
    conn.close()


@pytest.mark.parametrize(
    ("version", "affected"),
    [
        ((3, 40, 1), True),
        ((3, 44, 5), True),
        ((3, 44, 6), False),
        ((3, 45, 0), True),
        ((3, 50, 6), True),
        ((3, 50, 7), False),
        ((3, 51, 2), True),
        ((3, 51, 3), False),
        ((3, 53, 4), False),
    ],
)
def test_wal_reset_bug_versions(version: tuple[int, int, int], affected: bool) -> None:
    assert driver.has_wal_reset_bug(version) is affected


def test_an_affected_sqlite_warns(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "version_info", lambda module=None: (3, 40, 1))
    with pytest.warns(driver.SqliteVersionWarning, match="WAL-reset"):
        open_queue(db_path).close()


def test_errors_inside_a_call_release_the_lock_and_roll_back(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlq.sqlite.transaction as transaction

    q = open_queue(db_path, lease_seconds=1)
    q.add("t", 0)
    q.reserve(0)

    def broken(row: object) -> object:
        raise RuntimeError("a bug while reading what fell due")

    monkeypatch.setattr(transaction, "event_row", broken)
    with pytest.raises(RuntimeError):
        q.status("t", 5)  # the lease is due: reading the event fails
    monkeypatch.undo()
    assert q.status("t", 5) == "AVAILABLE"  # not deadlocked, nothing half-done

    with pytest.raises(RuntimeError), q._call(6) as tx:
        tx.insert("default", "half", 3, sqlq.Retry(), None, None, None)
        raise RuntimeError("a bug in the middle of a call")
    assert q.status("half", 6) is None  # rolled back, and the lock is free again
    q.close()


# --- payloads written by others, and typed errors of the settings -----------------------------


def test_a_payload_stored_as_text_that_is_not_utf8_is_dead_lettered(db_path: Path) -> None:
    """Only an outside edit stores such text; SQLite's driver would raise on every
    read of the row, so no claim could get past it."""
    q = open_queue(db_path)
    q.add_many([("bad", "x"), ("next", {"n": 1})], 0)
    conn = driver.dbapi.connect(db_path, isolation_level=None)
    try:  # the JSON text "\x80\xff" with its two bytes not UTF-8
        conn.execute(
            "UPDATE sqlq_tasks SET payload = CAST(X'2280FF22' AS TEXT) WHERE task_id = 'bad'"
        )
    finally:
        conn.close()
    lease = q.claim(1)
    assert (lease.task_id, lease.payload) == ("next", {"n": 1})
    info = q.info("bad", 1)
    assert (info.state, info.last_error) == (
        "DEAD",
        "payload cannot be decoded: the stored text is not valid UTF-8",
    )
    assert info.payload == payload.Undecodable(
        '"\udc80\udcff"', "the stored text is not valid UTF-8"
    )
    assert [t.task_id for t in q.tasks(1)] == ["bad", "next"]
    q.close()


@pytest.mark.parametrize(
    ("where", "said"),
    [
        ("q\x00.db", "NUL"),
        ("sqlite:///q\x00.db", "NUL"),
        ("sqlite:///q.db?mode=ro", "may only name the file"),
        ("sqlite:///q.db?timeout=5", "may only name the file"),
        ("sqlite://host/q.db", "may only name the file"),
    ],
)
def test_a_path_with_nul_or_a_url_with_options_is_refused_and_nothing_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig, match=said):
        open_queue(where)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []
    open_queue("sqlite:///q.db").close()  # type: ignore[arg-type]
    assert "q.db" in os.listdir(tmp_path)


def test_the_callers_engine_may_carry_url_options(db_path: Path) -> None:
    q = open_queue(db_path)
    engine = sqlalchemy.create_engine(f"sqlite:///{db_path}?timeout=5", module=driver.dbapi)
    with engine.connect() as conn:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        assert q.add("t", 0, conn=conn) is True
        conn.exec_driver_sql("COMMIT")
    assert q.status("t", 0) == "AVAILABLE"
    engine.dispose()
    q.close()


def test_a_connection_through_another_sqlite_library_is_refused(db_path: Path) -> None:
    """The caller's connection to the queue's file, but through Python's own sqlite3 where
    sqlq uses another SQLite library: two libraries in one process break each other's locks."""
    if driver.dbapi is sqlite3:
        pytest.skip("sqlq uses Python's own sqlite3 here")
    q = open_queue(db_path)
    stdlib = sqlalchemy.create_engine(f"sqlite:///{db_path}", module=sqlite3)
    with stdlib.begin() as conn, pytest.raises(InvalidArgument, match="SQLite library"):
        q.add("x", conn=conn)
    stdlib.dispose()
    assert q.status("x") is None
    q.close()


def _triggers(queue: sqlq.Queue) -> tuple[list[str], int]:
    """The triggers on the tasks of the queue's file and its sqlq_clock.grouped mark,
    read with the queue's SQLite library (a connection of another library would drop
    the queue's file locks as it closes)."""
    with queue.engine.connect() as conn:
        rows = conn.exec_driver_sql(
            "SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'sqlq_tasks'"
        )
        names = sorted(name for (name,) in rows)
        (grouped,) = conn.exec_driver_sql("SELECT grouped FROM sqlq_clock").one()
        return names, grouped


def test_the_group_triggers_come_with_the_first_grouped_add_and_bind_every_connection(
    db_path: Path,
) -> None:
    """A file whose queues use no groups has no trigger on its tasks (its adds and
    claims run none) and no grouped mark (its calls look for no group); the first grouped add
    makes them, and a queue whose statements were prepared before (another
    process's, here another connection's) obeys them."""
    first = open_queue(db_path)
    first.add("plain", 0)
    assert first.reserve(0) == "plain"
    assert _triggers(first) == ([], 0)
    second = open_queue(db_path)
    second.set_limit("g", 0, concurrency=1)
    assert _triggers(first) == ([], 0)  # limits alone need no trigger
    second.add_many(["g1", "g2"], 0, group="g")
    assert _triggers(first) == (["sqlq_group_added", "sqlq_group_moved"], 1)
    assert [first.reserve(1), first.reserve(1)] == ["g1", None]  # its lease counted
    assert first.complete("g1", 2) and second.reserve(2) == "g2"
    assert second.groups(2)["g"].running == 1
    first.close()
    second.close()


def _clock_paused(queue: sqlq.Queue) -> int:
    with queue.engine.connect() as conn:
        (paused,) = conn.exec_driver_sql("SELECT paused FROM sqlq_clock").one()
        return int(paused)


def test_the_files_paused_mark_follows_its_paused_queues_written_any_way(db_path: Path) -> None:
    """The claims look for a pause only while sqlq_clock.paused says some queue of the
    file is paused (migration 13); triggers on sqlq_paused keep it, so a pause written
    in the sqlite3 shell stops the claims too, and resuming one of two paused queues
    leaves the other paused."""
    need(shutil.which("sqlite3"), "no sqlite3 shell on this machine")
    a, b = open_queue(db_path, queue="a"), open_queue(db_path, queue="b")
    for q in (a, b):
        q.add_many(["t1", "t2", "t3"], 0)
    assert _clock_paused(a) == 0 and a.reserve(1) == "t1"
    a.pause(1)
    b.pause(1)
    assert _clock_paused(a) == 1
    a.resume(2)
    assert _clock_paused(a) == 1  # b still is
    assert b.reserve(2) is None and b.claim_many(2, 2) == [] and a.reserve(2) == "t2"
    b.resume(3)
    assert _clock_paused(a) == 0 and b.reserve(3) == "t1"
    shell = subprocess.run(
        ["sqlite3", str(db_path), "INSERT INTO sqlq_paused VALUES ('a', 4);"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shell.returncode == 0, shell.stderr
    assert a.reserve(4) is None and a.paused and b.reserve(4) == "t2"
    a.close()
    b.close()


@pytest.mark.parametrize(
    "change",
    [
        "state = 'DONE'",  # no such state
        "state = 'RESERVED', lease_id = 1",  # no deadline
        "state = 'RESERVED', deadline = 5",  # no token
        "run_at = 5",  # AVAILABLE with a wake-up time
        "finished_at = 5",  # not finished
        "state = 'COMPLETED', finished_at = 5",  # never attempted
        "state = 'DEAD', finished_at = 5",  # attempts left
        "result = '1'",  # a result of a task not completed
        "stop_requested_at = 5",  # a stop request of a task not started
        "attempts = 3",  # as many attempts as allowed, still in line
    ],
)
def test_the_sqlite3_shell_cannot_write_a_row_the_queue_would_misread(
    db_path: Path, change: str
) -> None:
    """An operator's UPDATE in the sqlite3 shell that breaks the state machine (what
    the partial indexes, the due probes and the queue logic rely on) is refused by
    sqlq_tasks' CHECK, and the task is left as it was."""
    need(shutil.which("sqlite3"), "no sqlite3 shell on this machine")
    q = open_queue(db_path, max_attempts=3)
    q.add("t", 0)
    shell = subprocess.run(
        ["sqlite3", str(db_path), f"UPDATE sqlq_tasks SET {change} WHERE task_id = 't';"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shell.returncode != 0 and "CHECK constraint failed" in shell.stderr, shell
    assert q.reserve(1) == "t"
    q.close()


def test_a_call_opened_as_claiming_nothing_still_claims_by_the_pause_and_the_limits(
    db_path: Path,
) -> None:
    """A call that claims nothing (one_write: an add, a completion) opens without
    reading the group and pause bits; a claim in such a call asks them first, so it
    still finds nothing in a paused queue and keeps a group's limit."""
    q = open_queue(db_path, max_attempts=3)
    q.set_limit("G", concurrency=1)
    q.add_many(["a", "b"], 0, group="G")
    assert q.reserve(1) == "a"

    def nothing(tx: object, asked: object) -> None:
        pass

    backend = q._backend  # type: ignore[attr-defined]
    with backend.transaction(2, "default", None, nothing, one_write=True) as tx:
        assert tx.claim("default", 30) is None  # b waits for a's slot
    assert q.complete("a", 2)
    with backend.transaction(2, "default", None, nothing, one_write=True) as tx:
        claimed = tx.claim("default", 30)  # the slot is free: b, through the group's line
        assert claimed is not None and claimed[0] == "b"
    q.pause(3)
    q.add("plain", 3)
    with backend.transaction(4, "default", None, nothing, one_write=True) as tx:
        assert tx.claim("default", 30) is None and tx.claim_many("default", 5, 30) == []
    q.resume(5)
    assert q.reserve(5) == "plain"
    q.close()
