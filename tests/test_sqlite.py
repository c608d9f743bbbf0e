"""What the SQLite face adds to the contract: durability, sharing, settings, errors."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy

import sqlq
from sqlq import payload
from sqlq.errors import Busy, CannotOpen, InvalidArgument, InvalidConfig, QueueClosed
from sqlq.sqlite import driver
from sqlq.sqlite.queries import Q


def open_queue(path: Path, **kw: object) -> sqlq.Queue:
    kw.setdefault("lease_seconds", 10)
    kw.setdefault("max_attempts", 3)
    return sqlq.Queue(path, **kw)  # type: ignore[arg-type]


def test_reopen_keeps_tasks_and_live_leases(db_path: Path) -> None:
    q = open_queue(db_path)
    for name in ("a", "b", "c", "d"):
        q.add(name, 0)
    assert q.reserve(1) == "a"  # lease until 11
    assert q.reserve(2) == "b"
    q.complete("b", 3)
    q.close()
    with pytest.raises(QueueClosed):
        q.status("a", 4)

    q = open_queue(db_path)
    assert [q.status(t, 4) for t in "abcd"] == ["RESERVED", "COMPLETED", "AVAILABLE", "AVAILABLE"]
    assert q.status("a", 10) == "RESERVED"
    assert q.status("a", 11) == "AVAILABLE"  # the lease taken before the reopen ran out on time
    assert [q.reserve(12), q.reserve(12), q.reserve(12)] == ["c", "d", "a"]
    q.close()


def test_high_water_mark_survives_reopen(db_path: Path) -> None:
    q = open_queue(db_path)
    q.add("t", 100)
    q.close()
    q = open_queue(db_path)
    assert q.reserve(5) == "t"  # handled at 100: lease until 110
    assert q.status("t", 109) == "RESERVED"
    assert q.status("t", 110) == "AVAILABLE"
    q.close()


def test_named_queues_share_a_file_but_not_a_line(db_path: Path) -> None:
    emails = open_queue(db_path, queue="emails")
    images = open_queue(db_path, queue="images", max_attempts=1)
    assert emails.add("job", 0) is True
    assert images.add("job", 0) is True  # same id, other queue
    assert images.reserve(1) == "job"
    assert images.reserve(1) is None
    assert emails.status("job", 1) == "AVAILABLE"
    assert emails.reserve(2) == "job"
    # Each queue's due leases expire in calls on that queue; the clock is shared.
    assert emails.status("job", 20) == "AVAILABLE"
    assert images.counts()["RESERVED"] == 1
    assert images.status("job", 0) == "DEAD"  # handled at 20, the file's high-water mark
    assert images.counts()["DEAD"] == 1
    emails.close()
    images.close()


def test_max_attempts_is_fixed_per_task_when_added(db_path: Path) -> None:
    q1 = open_queue(db_path, max_attempts=1)
    q1.add("one-shot", 0)
    q3 = open_queue(db_path, max_attempts=3)
    q3.reserve(0)
    assert q3.fail("one-shot", 1) == "DEAD"
    q1.close()
    q3.close()


def test_retry_policy_is_fixed_per_task_when_added(db_path: Path) -> None:
    """Whichever Queue object fails a task or sees its lease run out, the task's own
    policy decides the wait: two objects with different policies share one file."""
    patient = open_queue(db_path, retry=sqlq.Retry.fixed(100))
    eager = open_queue(db_path, retry=sqlq.Retry.immediate())
    patient.add("slow", 0)
    patient.add("slow-expired", 0)
    eager.add("quick", 0)
    lease = eager.claim(0)
    assert lease is not None and lease.task_id == "slow"
    assert eager.fail("slow", 1, token=lease.token) == "WAITING"
    assert eager.reserve(1) == "slow-expired"  # its lease ends at 11, in eager's call
    assert eager.status("slow-expired", 11) == "WAITING"
    lease = patient.claim(11)
    assert lease is not None and lease.task_id == "quick"
    assert patient.fail("quick", 12, token=lease.token) == "AVAILABLE"
    assert [(t.task_id, t.run_at) for t in patient.tasks(12, state="WAITING")] == [
        ("slow", 101),
        ("slow-expired", 111),
    ]
    patient.close()
    eager.close()


def test_a_now_far_behind_the_queues_time_is_handled_there_with_a_warning(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """add("p2", 5) against a queue at the wall clock: 5 is a valid now, so the task is
    added at the queue's time as the contract says, but the likely mistake (5 meant
    as the payload) is named in a warning."""
    q = open_queue(db_path)
    q.add("p1")
    with caplog.at_level("WARNING", logger="sqlq"):
        assert q.add("p2", 5) is True
    info = q.info("p2")
    assert info is not None and info.created_at > 10**9 and info.payload is None
    assert [r.getMessage() for r in caplog.records if "behind the queue's time" in r.getMessage()]
    assert "pass payload=5" in caplog.text
    q.close()
    caplog.clear()
    fresh = open_queue(db_path)  # its own warning budget
    with caplog.at_level("WARNING", logger="sqlq"):
        fresh.add("p3", info.created_at - 30)  # behind by less than max_clock_step: usual
    assert caplog.text == ""
    fresh.close()


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
    assert snap.counts == {"WAITING": 0, "AVAILABLE": 1, "RESERVED": 1, "COMPLETED": 0, "DEAD": 0}
    assert (snap.oldest_available_age, snap.next_deadline) == (20.0, 1_010.0)
    assert q.stats().counts["AVAILABLE"] == 2  # a call applies the expiry
    assert q.snapshot().counts["RESERVED"] == 0
    q.close()


def test_default_clock_is_used_and_injectable(db_path: Path) -> None:
    now = [1_000.0]
    q = open_queue(db_path, lease_seconds=30, clock=lambda: now[0])
    q.add("t")
    assert q.reserve() == "t"
    now[0] += 29.5
    assert q.status("t") == "RESERVED"
    now[0] += 0.5
    assert q.status("t") == "AVAILABLE"
    q.close()

    real = open_queue(db_path)  # time.time(): far past 1030
    assert real.reserve() == "t"
    real.close()


def test_int_times_give_exact_answers_past_float_rounding(db_path: Path) -> None:
    q = open_queue(db_path, lease_seconds=10**9)
    big = 10**9
    q.add("t", big)
    q.reserve(big)
    assert q.status("t", 2 * big - 1) == "RESERVED"
    assert q.status("t", 2 * big) == "AVAILABLE"
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


def test_states_are_readable_in_the_table(db_path: Path) -> None:
    q = open_queue(db_path)
    q.add("a", 0)
    q.add("b", 0)
    q.reserve(1)
    q.close()
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            "SELECT task_id, state, attempts FROM sqlq_tasks ORDER BY task_id"
        ).fetchall()
    conn.close()
    assert rows == [("a", "RESERVED", 1), ("b", "AVAILABLE", 0)]


def test_hot_queries_use_indexes(db_path: Path) -> None:
    q = open_queue(db_path)
    q.close()
    with sqlite3.connect(db_path) as conn:

        def plan(sql: str, params: dict[str, object] | tuple[object, ...]) -> str:
            return " | ".join(r[-1] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))

        for due in (plan(Q.open_call, ("q", 5)), plan(Q.due_events, ("q", 5))):
            assert "sqlq_tasks_leases" in due and "sqlq_tasks_waiting" in due
            assert "SCAN sqlq_tasks" not in due
        claim = plan(Q.claim_front, ("q", 1, 1, 1))
        assert "sqlq_tasks_line" in claim and "TEMP B-TREE" not in claim
        get = plan(Q.get_task, {"queue": "q", "task_id": "t"})
        assert "USING INDEX" in get and "SCAN" not in get
        complete = plan(Q.complete_task, ("q", "t", 1, 1))
        assert "USING INDEX" in complete and "SCAN" not in complete
    conn.close()


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


def test_a_queue_is_safe_to_share_between_threads(db_path: Path) -> None:
    q = open_queue(db_path, synchronous="normal")
    n_tasks, n_threads = 400, 8
    for i in range(n_tasks):
        q.add(f"t{i}", 0)
    completed: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while (task := q.reserve(1)) is not None:
            assert q.complete(task, 1) is True
            with lock:
                completed.append(task)

    threads = [threading.Thread(target=worker) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(completed) == sorted(f"t{i}" for i in range(n_tasks))
    assert q.counts()["COMPLETED"] == n_tasks
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
    import sqlq.sqlite.backend as backend

    q = open_queue(db_path, lease_seconds=1)
    q.add("t", 0)
    q.reserve(0)

    def broken(row: object) -> object:
        raise RuntimeError("a bug while reading what fell due")

    monkeypatch.setattr(backend, "_event_row", broken)
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


def _store_payload(path: Path, task_id: str, stored: str) -> None:
    """Write a task's payload column directly (an older sqlq, an outside edit)."""
    conn = driver.dbapi.connect(path, isolation_level=None)
    try:
        conn.execute("UPDATE sqlq_tasks SET payload = ? WHERE task_id = ?", (stored, task_id))
    finally:
        conn.close()


UNREADABLE = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "unclosed": "[" * 100_000,
    "not-json": '{"a": [1, 2',
    "unterminated": '"open string \\" and more',
}


def test_rows_whose_payload_cannot_be_decoded_are_dead_lettered_by_claim(db_path: Path) -> None:
    q = open_queue(db_path)
    for task_id in UNREADABLE:
        q.add(task_id, 0, payload="placeholder")
    q.add("next", 0, payload={"n": 1})
    for task_id, stored in UNREADABLE.items():
        _store_payload(db_path, task_id, stored)
    lease = q.claim(1)
    assert (lease.task_id, lease.payload) == ("next", {"n": 1})
    dead = q.dead(1)
    assert [t.task_id for t in dead] == list(UNREADABLE)
    for info in [*dead, *q.tasks(1, state="DEAD"), *(q.info(t, 1) for t in UNREADABLE)]:
        assert (info.state, info.attempts) == ("DEAD", 3)
        assert info.last_error.startswith("payload cannot be decoded: ")
        assert info.payload == payload.Undecodable(UNREADABLE[info.task_id], info.payload.reason)
    assert dead[0].payload.reason.startswith("JSON nested more than 200")
    assert dead[2].payload.reason.startswith("not valid JSON")
    assert q.claim(1) is None
    q.close()


def test_claim_many_skips_rows_whose_payload_cannot_be_decoded(db_path: Path) -> None:
    q = open_queue(db_path)
    q.add_many([("bad", "x"), "a", "b"], 0)
    _store_payload(db_path, "bad", UNREADABLE["deep"])
    assert [lease.task_id for lease in q.claim_many(2, 1)] == ["a", "b"]
    assert q.status("bad", 1) == "DEAD"
    q.close()


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


@pytest.mark.parametrize("name", ["\x00", "a\x00b", "default\x00"])
def test_a_queue_name_with_nul_is_refused(db_path: Path, name: str) -> None:
    with pytest.raises(InvalidConfig, match="NUL"):
        open_queue(db_path, queue=name)


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


@pytest.mark.parametrize("clock", [5, "time.time", None])
def test_a_clock_that_cannot_be_called_is_refused_at_construction(
    db_path: Path, clock: object
) -> None:
    with pytest.raises(InvalidConfig, match="clock"):
        open_queue(db_path, clock=clock)


def test_calls_with_the_callers_connection_after_close_are_refused(db_path: Path) -> None:
    q = open_queue(db_path)
    q.add("t", 0)
    token = q.claim(0).token
    engine = q.engine
    q.close()
    with engine.begin() as conn:
        with pytest.raises(QueueClosed):
            q.add("late", 1, conn=conn)
        with pytest.raises(QueueClosed):
            q.add_many(["late"], 1, conn=conn)
        with pytest.raises(QueueClosed):
            q.complete("t", 1, token=token, conn=conn)
    with open_queue(db_path) as reopened:
        assert reopened.status("late", 1) is None
        assert reopened.status("t", 1) == "RESERVED"


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


def test_a_queue_cannot_be_pickled_to_another_process(db_path: Path) -> None:
    """A spawned process gets its arguments pickled: a Queue (a live connection) is
    refused with a typed error that says what to do instead."""
    q = open_queue(db_path)
    with pytest.raises(InvalidArgument, match="open a Queue on the same file"):
        pickle.dumps(q)
    q.close()
