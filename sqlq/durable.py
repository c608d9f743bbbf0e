"""Queue: the lease queue of sqlq.contract, durable in a database shared by processes.

Each call is one write transaction on the backend: first every due lease
expires (in deadline, then reservation order), then the call does its work.
The logic here decides what happens to a task; the backend only stores it
(see sqlq.backend for that contract).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType

from .backend import Backend, Transaction
from .contract import (
    Number,
    State,
    after_failure,
    check_queue_name,
    check_settings,
    check_task_id,
    check_time,
)
from .sqlite.backend import SqliteBackend, Synchronous


class Queue:
    """A named queue in a SQLite file, safe for many processes and threads.

    ``now`` is optional in every call and defaults to ``clock()`` (Unix time).
    Processes' clocks disagree a little, so the database keeps a high-water
    mark of time: a call whose ``now`` is below it is handled at the mark.

    ``max_attempts`` is stored with each task when it is added; ``lease_seconds``
    applies to the reservations this object makes.
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        lease_seconds: Number,
        max_attempts: int,
        queue: str = "default",
        synchronous: Synchronous = "full",
        busy_timeout: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.lease_seconds, self.max_attempts = check_settings(lease_seconds, max_attempts)
        self.queue = check_queue_name(queue)
        self._clock = clock
        self._backend: Backend = SqliteBackend(
            path_or_url, synchronous=synchronous, busy_timeout=busy_timeout
        )

    # --- the contract -------------------------------------------------------------

    def add(self, task_id: str, now: Number | None = None) -> bool:
        """Put a new task at the back of the line; False if the id exists in any state."""
        task_id = check_task_id(task_id)
        with self._call(now) as tx:
            return tx.insert(self.queue, task_id, self.max_attempts)

    def reserve(self, now: Number | None = None) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available."""
        with self._call(now) as tx:
            return tx.claim(self.queue, tx.now + self.lease_seconds)

    def complete(self, task_id: str, now: Number | None = None) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now."""
        task_id = check_task_id(task_id)
        with self._call(now) as tx:
            return tx.complete(self.queue, task_id)

    def fail(self, task_id: str, now: Number | None = None) -> str | None:
        """Fail a RESERVED task: back of the line, or DEAD once its attempts are used."""
        task_id = check_task_id(task_id)
        with self._call(now) as tx:
            task = tx.get(self.queue, task_id)
            if task is None or task.state is not State.RESERVED:
                return None
            state = after_failure(task.attempts, task.max_attempts)
            tx.release(task, state)
            return state.value

    def status(self, task_id: str, now: Number | None = None) -> str | None:
        """The task's state after due leases expired, or None for an unknown id."""
        task_id = check_task_id(task_id)
        with self._call(now) as tx:
            task = tx.get(self.queue, task_id)
            return None if task is None else task.state.value

    # --- beyond the contract --------------------------------------------------------

    def counts(self) -> dict[str, int]:
        """Tasks of this queue per state, as last written (leases are expired by calls)."""
        found = self._backend.counts().get(self.queue, {})
        return {state.value: found.get(state.value, 0) for state in State}

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------

    @contextmanager
    def _call(self, now: Number | None) -> Iterator[Transaction]:
        """One call: a transaction at ``now`` in which due leases have expired."""
        now = check_time(self._clock() if now is None else now)
        with self._backend.transaction(now) as tx:
            for task in tx.due_leases():
                tx.release(task, after_failure(task.attempts, task.max_attempts))
            yield tx
