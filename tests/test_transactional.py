"""Transactional enqueue and completion: the queue's writes commit or roll back
together with the caller's own writes to the same database."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import sqlq
from sqlq.errors import InvalidArgument


@pytest.fixture
def queue(queue_url: str) -> sqlq.Queue:
    q = sqlq.Queue(queue_url, lease_seconds=30, max_attempts=3)
    with q.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT)")
    return q


def _orders(q: sqlq.Queue) -> list[tuple[int, str]]:
    with q.engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql("SELECT id, status FROM orders")]  # type: ignore[misc]


def test_enqueue_commits_with_the_callers_transaction(queue: sqlq.Queue) -> None:
    with queue.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (1, 'new')")
        assert queue.add("ship-order-1", payload={"order": 1}, conn=conn) is True
    assert _orders(queue) == [(1, "new")]
    assert queue.status("ship-order-1") == "AVAILABLE"
    queue.close()


def test_rollback_undoes_both_the_row_and_the_task(queue: sqlq.Queue) -> None:
    with pytest.raises(RuntimeError), queue.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (2, 'new')")
        queue.add("ship-order-2", conn=conn)
        queue.add_many(["a", "b"], conn=conn)
        raise RuntimeError("the caller changed its mind")
    assert _orders(queue) == []
    assert queue.status("ship-order-2") is None and queue.status("a") is None
    queue.close()


def test_completion_with_the_callers_transaction(queue: sqlq.Queue) -> None:
    queue.add("charge-3")
    lease = queue.claim()
    assert lease is not None

    # The handler's effect and the completion roll back together...
    with pytest.raises(RuntimeError), queue.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (3, 'charged')")
        assert queue.complete("charge-3", token=lease.token, conn=conn) is True
        raise RuntimeError("crash before commit")
    assert _orders(queue) == []
    assert queue.status("charge-3") == "RESERVED"

    # ...and commit together: exactly-once effects for work stored in this database.
    with queue.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (3, 'charged')")
        assert queue.complete("charge-3", token=lease.token, conn=conn) is True
    assert _orders(queue) == [(3, "charged")]
    assert queue.status("charge-3") == "COMPLETED"
    queue.close()


def test_a_refused_completion_lets_the_caller_roll_back(queue: sqlq.Queue) -> None:
    queue.add("t", now=0)
    stale = queue.claim(now=0)
    assert stale is not None
    queue.claim(now=30)  # the lease ran out and another worker holds the task
    with queue.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (4, 'charged')")
        if not queue.complete("t", now=31, token=stale.token, conn=conn):
            conn.rollback()
    assert _orders(queue) == []
    queue.close()


def test_the_connection_must_be_the_queues_and_in_a_transaction(
    queue: sqlq.Queue, new_url: Callable[[], str]
) -> None:
    with queue.engine.connect() as conn, pytest.raises(InvalidArgument, match="transaction"):
        queue.add("x", conn=conn)
    other = sqlq.Queue(new_url(), lease_seconds=30, max_attempts=3)  # another database
    with other.engine.begin() as conn, pytest.raises(InvalidArgument, match="database"):
        queue.add("x", conn=conn)
    other.close()
    with pytest.raises(InvalidArgument):
        queue.add("x", conn="not a connection")  # type: ignore[arg-type]
    assert queue.status("x") is None
    queue.close()


def test_a_failed_call_inside_the_callers_transaction_leaves_it_usable(queue: sqlq.Queue) -> None:
    with queue.engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO orders (id, status) VALUES (5, 'new')")
        with pytest.raises(sqlq.errors.PayloadTooLarge):
            queue.add("big", payload="x" * (2 * 1024 * 1024), conn=conn)
        assert queue.add("small", conn=conn) is True
    assert _orders(queue) == [(5, "new")]
    assert queue.status("small") == "AVAILABLE" and queue.status("big") is None
    queue.close()
