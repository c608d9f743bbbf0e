"""Async handlers in sqlq.Worker, and sqlq.AsyncQueue.

Async handlers run on the worker's event loop; the tests order themselves with
asyncio and threading events and ManualClock, never with sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sqlq
from sqlq.worker import Worker, WorkerStats


@pytest.fixture
def open_queue(db_path: Path) -> Iterator[Callable[..., sqlq.Queue]]:
    """open_queue(lease_seconds=1.0, max_attempts=5, **options) -> a Queue on the test's file."""
    opened: list[sqlq.Queue] = []

    def make(lease_seconds: float = 1.0, max_attempts: int = 5, **options: Any) -> sqlq.Queue:
        queue = sqlq.Queue(
            db_path,
            lease_seconds=lease_seconds,
            max_attempts=max_attempts,
            synchronous="normal",
            **options,
        )
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


# --- async handlers in the Worker -------------------------------------------------------


def test_an_async_handler_is_awaited_before_its_task_completes(
    open_queue: Callable[..., sqlq.Queue],
) -> None:
    """The bug of issue 11: the coroutine was never awaited, yet the task was counted
    completed.  Now the task completes only once the coroutine has run to its end."""
    queue = open_queue()
    queue.add_many([(f"t{i}", {"n": i}) for i in range(5)])
    ran: list[tuple[int, str]] = []

    async def handler(payload: dict[str, int]) -> None:
        await asyncio.sleep(0)  # gives the loop a turn: the coroutine really runs there
        ran.append((payload["n"], threading.current_thread().name))

    stats = Worker(queue, handler, concurrency=2).run(stop_when_idle=True)

    assert sorted(n for n, _ in ran) == list(range(5))
    assert stats == WorkerStats(claimed=5, completed=5)
    assert queue.counts()["COMPLETED"] == 5
