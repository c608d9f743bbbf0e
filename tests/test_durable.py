"""What a durable queue (sqlq.Queue) adds to the contract, on every backend: its tasks
and leases outlive the object, several objects and named queues share one database,
times and policies are fixed in the rows, and bad settings are refused.

Each test takes a new database from conftest.py's ``queue_url`` and uses public API
only; what holds for SQLite alone (its files, pragmas, locks) is in test_sqlite.py.
"""

from __future__ import annotations

import pickle
import threading

import pytest
import sqlalchemy as sa

import sqlq
from sqlq import payload
from sqlq.errors import InvalidArgument, InvalidConfig, QueueClosed


def open_queue(url: str, **kw: object) -> sqlq.Queue:
    kw.setdefault("lease_seconds", 10)
    kw.setdefault("max_attempts", 3)
    return sqlq.Queue(url, **kw)  # type: ignore[arg-type]


def test_reopen_keeps_tasks_and_live_leases(queue_url: str) -> None:
    q = open_queue(queue_url)
    for name in ("a", "b", "c", "d"):
        q.add(name, 0)
    assert q.reserve(1) == "a"  # lease until 11
    assert q.reserve(2) == "b"
    q.complete("b", 3)
    q.close()
    with pytest.raises(QueueClosed):
        q.status("a", 4)

    q = open_queue(queue_url)
    assert [q.status(t, 4) for t in "abcd"] == ["RESERVED", "COMPLETED", "AVAILABLE", "AVAILABLE"]
    assert q.status("a", 10) == "RESERVED"
    assert q.status("a", 11) == "AVAILABLE"  # the lease taken before the reopen ran out on time
    assert [q.reserve(12), q.reserve(12), q.reserve(12)] == ["c", "d", "a"]
    q.close()


def test_high_water_mark_survives_reopen(queue_url: str) -> None:
    q = open_queue(queue_url)
    q.add("t", 100)
    q.close()
    q = open_queue(queue_url)
    assert q.reserve(5) == "t"  # handled at 100: lease until 110
    assert q.status("t", 109) == "RESERVED"
    assert q.status("t", 110) == "AVAILABLE"
    q.close()


def test_named_queues_share_a_file_but_not_a_line(queue_url: str) -> None:
    emails = open_queue(queue_url, queue="emails")
    images = open_queue(queue_url, queue="images", max_attempts=1)
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


def test_max_attempts_is_fixed_per_task_when_added(queue_url: str) -> None:
    q1 = open_queue(queue_url, max_attempts=1)
    q1.add("one-shot", 0)
    q3 = open_queue(queue_url, max_attempts=3)
    q3.reserve(0)
    assert q3.fail("one-shot", 1) == "DEAD"
    q1.close()
    q3.close()


def test_retry_policy_is_fixed_per_task_when_added(queue_url: str) -> None:
    """Whichever Queue object fails a task or sees its lease run out, the task's own
    policy decides the wait: two objects with different policies share one file."""
    patient = open_queue(queue_url, retry=sqlq.Retry.fixed(100))
    eager = open_queue(queue_url, retry=sqlq.Retry.immediate())
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
    queue_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """add("p2", 5) against a queue at the wall clock: 5 is a valid now, so the task is
    added at the queue's time as the contract says, but the likely mistake (5 meant
    as the payload) is named in a warning."""
    q = open_queue(queue_url)
    q.add("p1")
    with caplog.at_level("WARNING", logger="sqlq"):
        assert q.add("p2", 5) is True
    info = q.info("p2")
    assert info is not None and info.created_at > 10**9 and info.payload is None
    assert [r.getMessage() for r in caplog.records if "behind the queue's time" in r.getMessage()]
    assert "pass payload=5" in caplog.text
    q.close()
    caplog.clear()
    fresh = open_queue(queue_url)  # its own warning budget
    with caplog.at_level("WARNING", logger="sqlq"):
        fresh.add("p3", info.created_at - 30)  # behind by less than max_clock_step: usual
    assert caplog.text == ""
    fresh.close()


def test_default_clock_is_used_and_injectable(queue_url: str) -> None:
    now = [1_000.0]
    q = open_queue(queue_url, lease_seconds=30, clock=lambda: now[0])
    q.add("t")
    assert q.reserve() == "t"
    now[0] += 29.5
    assert q.status("t") == "RESERVED"
    now[0] += 0.5
    assert q.status("t") == "AVAILABLE"
    q.close()

    real = open_queue(queue_url)  # time.time(): far past 1030
    assert real.reserve() == "t"
    real.close()


def test_int_times_give_exact_answers_past_float_rounding(queue_url: str) -> None:
    q = open_queue(queue_url, lease_seconds=10**9)
    big = 10**9
    q.add("t", big)
    q.reserve(big)
    assert q.status("t", 2 * big - 1) == "RESERVED"
    assert q.status("t", 2 * big) == "AVAILABLE"
    q.close()


def test_a_queue_is_safe_to_share_between_threads(queue_url: str) -> None:
    q = open_queue(queue_url)
    n_tasks, n_threads = 400, 8
    q.add_many([f"t{i}" for i in range(n_tasks)], 0)
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


def test_states_are_readable_in_the_table(queue_url: str) -> None:
    q = open_queue(queue_url)
    q.add("a", 0)
    q.add("b", 0)
    q.reserve(1)
    tasks = sa.table("sqlq_tasks", *map(sa.column, ("task_id", "state", "attempts")))
    with q.engine.connect() as conn:
        rows = conn.execute(sa.select(tasks).order_by(tasks.c.task_id)).all()
    assert [tuple(row) for row in rows] == [("a", "RESERVED", 1), ("b", "AVAILABLE", 0)]
    q.close()


def test_a_queue_cannot_be_pickled_to_another_process(queue_url: str) -> None:
    """A spawned process gets its arguments pickled: a Queue (a live connection) is
    refused with a typed error that says what to do instead."""
    q = open_queue(queue_url)
    with pytest.raises(InvalidArgument, match="open a Queue on the same"):
        pickle.dumps(q)
    q.close()


def _store_payload(q: sqlq.Queue, task_id: str, stored: str) -> None:
    """Write a task's payload column directly (an older sqlq, an outside edit)."""
    with q.engine.begin() as conn:
        conn.execute(TASKS.update().where(TASKS.c.task_id == task_id).values(payload=stored))


TASKS = sa.table("sqlq_tasks", sa.column("task_id"), sa.column("payload"))


UNREADABLE = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "unclosed": "[" * 100_000,
    "not-json": '{"a": [1, 2',
    "unterminated": '"open string \\" and more',
}


def test_rows_whose_payload_cannot_be_decoded_are_dead_lettered_by_claim(queue_url: str) -> None:
    q = open_queue(queue_url)
    for task_id in UNREADABLE:
        q.add(task_id, 0, payload="placeholder")
    q.add("next", 0, payload={"n": 1})
    for task_id, stored in UNREADABLE.items():
        _store_payload(q, task_id, stored)
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


def test_claim_many_skips_rows_whose_payload_cannot_be_decoded(queue_url: str) -> None:
    q = open_queue(queue_url)
    q.add_many([("bad", "x"), "a", "b"], 0)
    _store_payload(q, "bad", UNREADABLE["deep"])
    assert [lease.task_id for lease in q.claim_many(2, 1)] == ["a", "b"]
    assert q.status("bad", 1) == "DEAD"
    q.close()


@pytest.mark.parametrize("name", ["\x00", "a\x00b", "default\x00"])
def test_a_queue_name_with_nul_is_refused(queue_url: str, name: str) -> None:
    with pytest.raises(InvalidConfig, match="NUL"):
        open_queue(queue_url, queue=name)


@pytest.mark.parametrize("clock", [5, "time.time", None])
def test_a_clock_that_cannot_be_called_is_refused_at_construction(
    queue_url: str, clock: object
) -> None:
    with pytest.raises(InvalidConfig, match="clock"):
        open_queue(queue_url, clock=clock)


def test_calls_with_the_callers_connection_after_close_are_refused(queue_url: str) -> None:
    q = open_queue(queue_url)
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
    with open_queue(queue_url) as reopened:
        assert reopened.status("late", 1) is None
        assert reopened.status("t", 1) == "RESERVED"
