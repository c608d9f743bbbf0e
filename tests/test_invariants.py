"""The guarded updates of the durable backends: a row that moved between the read and
the write raises InvariantViolation, and the whole call is rolled back.

In sqlq itself nothing moves a row between a call's read and its write (the
call holds the write lock); these tests make something do it, as a bug or an
outside edit of the tables would: a stale row handed back to the backend through
the port (every backend), or a trigger another connection installs (written in
SQLite's dialect, so on SQLite only).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from databases import queue_options, sqlite_only, sqlite_path

import sqlq
from sqlq.backend import Transaction
from sqlq.backends import open_backend
from sqlq.contract import Number, State
from sqlq.errors import InvariantViolation
from sqlq.sqlite import driver


@pytest.fixture
def outside(queue_url: str) -> Iterator[Any]:
    """Another connection to the queue's SQLite file, as an outside program would open it."""
    conn = driver.dbapi.connect(sqlite_path(queue_url), isolation_level=None)
    yield conn
    conn.close()


def _tables(conn: Any) -> list[list[tuple[Any, ...]]]:
    """Every row of the tasks and of the clock, read by the test's own SQL."""
    return [conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES]


TABLES = ("sqlq_tasks", "sqlq_clock")


def _expiring_and_waking(url: str, deadline: int, run_at: int) -> sqlq.Queue:
    """A queue where task "a"'s lease ends at ``deadline`` and "b" wakes at ``run_at``."""
    q = sqlq.Queue(url, lease_seconds=deadline, max_attempts=3, **queue_options(url))
    q.add("a", 0)
    assert q.reserve(0) == "a"
    q.add("b", 0, run_at=run_at)
    return q


@sqlite_only
@pytest.mark.parametrize(
    ("deadline", "run_at", "first", "moved", "edit"),
    [
        # a's lease ends first; the edit moves b's wake-up order: the wake-up's guard
        (10, 12, "a", "b", "seq = seq + 1000"),
        # b wakes first; the edit moves a's lease token: the expiry's guard
        (12, 10, "b", "a", "lease_id = lease_id + 1000"),
    ],
)
def test_an_event_whose_row_moved_meanwhile_raises_and_rolls_back(
    queue_url: str, outside: Any, deadline: int, run_at: int, first: str, moved: str, edit: str
) -> None:
    q = _expiring_and_waking(queue_url, deadline, run_at)
    outside.execute(
        f"CREATE TRIGGER meddle AFTER UPDATE OF state ON sqlq_tasks WHEN NEW.task_id = '{first}' "
        f"BEGIN UPDATE sqlq_tasks SET {edit} WHERE task_id = '{moved}'; END"
    )
    before = _tables(outside)
    with pytest.raises(InvariantViolation, match=repr(moved)):
        q.status("a", 20)  # both events due: the first one's update fires the trigger
    assert _tables(outside) == before  # the first event, the edit and the clock: undone
    outside.execute("DROP TRIGGER meddle")
    assert [q.status(t, 20) for t in "ab"] == ["AVAILABLE", "AVAILABLE"]  # not wedged
    assert [q.reserve(20), q.reserve(20)] == [first, moved]  # in the order they fell due
    q.close()


def test_a_stale_end_of_lease_raises_and_rolls_back(queue_url: str) -> None:
    """A Transaction of the port, opened on the queue's database, is handed the row of a
    lease that a claim in the same transaction has replaced."""
    q = sqlq.Queue(queue_url, lease_seconds=10, max_attempts=3, **queue_options(queue_url))
    q.add("t", 0)
    lease = q.claim(0)
    assert lease is not None
    before = _tasks(q)
    backend = open_backend(queue_url, **queue_options(queue_url))
    with (
        pytest.raises(InvariantViolation, match="'t'"),
        backend.transaction(1, q.queue, None, _nothing_due) as tx,
    ):
        stale = tx.get(q.queue, "t")
        assert stale is not None and stale.token == lease.token
        tx.end_lease(stale, State.AVAILABLE, tx.now, None)  # the current lease: fine
        assert tx.claim(q.queue, 20) is not None  # a new lease on the task
        tx.end_lease(stale, State.AVAILABLE, tx.now, None)  # the old one again
    backend.close()
    assert _tasks(q) == before
    assert q.status("t", 1) == "RESERVED"
    assert q.complete("t", 1, token=lease.token)  # the lease of before is still the task's
    q.close()


def _nothing_due(tx: Transaction, now: Number) -> None:
    raise AssertionError(f"nothing falls due at {now} here, nor is the call late")


def _tasks(q: sqlq.Queue) -> list[tuple[Any, ...]]:
    """Every stored task, read through the queue's engine."""
    with q.engine.connect() as conn:
        return [tuple(row) for row in conn.execute(sa.text("SELECT * FROM sqlq_tasks ORDER BY id"))]


@sqlite_only
def test_a_clock_moved_ahead_meanwhile_raises_and_rolls_back(queue_url: str, outside: Any) -> None:
    """The clock write at the end of a call never lowers the database's time or counter."""
    q = sqlq.Queue(queue_url, lease_seconds=10, max_attempts=3, **queue_options(queue_url))
    q.add("t", 5)
    outside.execute(
        "CREATE TRIGGER meddle AFTER INSERT ON sqlq_tasks "
        "BEGIN UPDATE sqlq_clock SET now = now + 1000, counter = counter + 1000; END"
    )
    before = _tables(outside)
    with pytest.raises(InvariantViolation, match="gone down"):
        q.add("u", 6)
    assert _tables(outside) == before
    outside.execute("DROP TRIGGER meddle")
    assert q.add("u", 6) and q.reserve(6) == "t"
    q.close()
