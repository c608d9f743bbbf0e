"""The storage contract: what the durable queue needs from a database, and nothing more.

:class:`sqlq.Queue` holds the queue logic (what happens to a task, and when) and
talks to storage only through the two protocols below.  A backend (SQLite today,
PostgreSQL later) implements them with its own SQL and promises:

* ``Backend.transaction(now)`` runs one call as one serialisable write
  transaction.  The write lock is held from the start; on any exception the
  transaction is rolled back and database errors come out as
  :class:`sqlq.errors.StorageError` subclasses with the driver's exception as
  ``__cause__``.  Nothing of a call is visible to others before it commits.
* The transaction's ``now`` is ``max(now, the database's high-water mark)``; the
  mark is raised to it when the transaction commits.
* Updates are guarded by the state the caller saw (compare-and-set); a guard
  that unexpectedly matches nothing raises :class:`sqlq.errors.InvariantViolation`.
* Ids handed out by ``insert`` (line position) and ``claim`` (lease id) come
  from one counter per database that only grows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import NamedTuple, Protocol

from .contract import Number, State


class TaskRow(NamedTuple):
    """A task as stored.  ``row_id`` identifies it within the database."""

    row_id: int
    task_id: str
    state: State
    attempts: int
    max_attempts: int
    lease_id: int | None


class Transaction(Protocol):
    """One call's view of the database, valid inside ``Backend.transaction``."""

    #: The effective time of the call (never below the database's high-water mark).
    now: Number

    def due_leases(self) -> Iterator[TaskRow]:
        """RESERVED tasks whose deadline is <= now, by (deadline, lease id)."""
        ...

    def insert(self, queue: str, task_id: str, max_attempts: int) -> bool:
        """Add an AVAILABLE task at the back of the line; False if the id exists."""
        ...

    def claim(self, queue: str, deadline: Number) -> str | None:
        """Reserve the front AVAILABLE task with a new lease id; its id, or None."""
        ...

    def get(self, queue: str, task_id: str) -> TaskRow | None:
        """The task, or None."""
        ...

    def complete(self, queue: str, task_id: str) -> bool:
        """RESERVED -> COMPLETED; False (and no change) if the task is not RESERVED."""
        ...

    def release(self, task: TaskRow, state: State) -> None:
        """End ``task``'s lease: AVAILABLE at the back of the line, or DEAD.

        Guarded by the task still being RESERVED under ``task.lease_id``.
        """
        ...


class Backend(Protocol):
    """A database holding any number of named queues."""

    def transaction(self, now: Number) -> AbstractContextManager[Transaction]:
        """One call: a write transaction at time ``now`` (see the module docstring)."""
        ...

    def counts(self) -> dict[str, dict[str, int]]:
        """Tasks per state, per queue name."""
        ...

    def close(self) -> None:
        """Release the connection(s).  Calls after close raise QueueClosed."""
        ...
