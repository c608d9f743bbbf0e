"""The records the storage port hands over (see sqlq.backend): a task as stored, a
worker's row of the registry, what a claim, stats and a dedupe key's holder answer,
and a due event.  Kept apart from the port's protocols so that what reads rows
(sqlq.browse, the SQL layer) needs nothing of the port itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .contract import Number, State
from .payload import Encoded
from .retry import Retry


class TaskRow(NamedTuple):
    """A task as stored.  ``row_id`` identifies it within the database."""

    row_id: int
    task_id: str
    state: State
    attempts: int
    max_attempts: int
    token: int | None
    seq: int
    retry: Retry
    deadline: Number | None = None
    run_at: Number | None = None
    payload: Encoded = None
    last_error: str | None = None
    created_at: Number = 0
    updated_at: Number = 0
    finished_at: Number | None = None
    name: str | None = None
    stop_requested_at: Number | None = None
    result: str | None = None
    progress: float | None = None
    progress_message: str | None = None
    group: str | None = None
    dedupe_key: str | None = None
    priority: int = 0


class WorkerRow(NamedTuple):
    """A worker's row of the worker registry, as stored (see sqlq.registry)."""

    worker_id: str
    queue: str
    host: str
    pid: int
    concurrency: int
    started_at: Number
    beat_at: Number
    stale_at: Number
    #: The leases it holds: JSON text, [[task id, token, since], ...].
    holds: str


#: What a claim hands back: (task id, token, attempt, payload, task name).
Claimed = tuple[str, int, int, Encoded, str | None]


def claim_each(claim: Callable[[], Claimed | None], n: int) -> list[Claimed]:
    """``claim()`` up to ``n`` times, until it finds nothing: a claim_many whose claims
    each depend on the one before (a group's slots and rate)."""
    claimed: list[Claimed] = []
    while len(claimed) < n and (one := claim()) is not None:
        claimed.append(one)
    return claimed


#: What stats and snapshot read: (counts per state, front of line available since,
#: next deadline, next run_at, paused).
Figures = tuple[dict[str, int], Number | None, Number | None, Number | None, bool]


class Holder(NamedTuple):
    """The task that holds a dedupe key (see sqlq.keys), as ``key_holder`` finds it."""

    row_id: int
    task_id: str
    state: State
    seq: int


#: A due event: (time, counter, task).  A RESERVED task's lease ran out at that
#: time; a WAITING task's run_at came.  Sorted by (time, counter).
Event = tuple[Number, int, TaskRow]


def due_of(row: Sequence[Any]) -> tuple[Number, Number | None]:
    """``next_due``'s answer from its query's row (both backends'): (time of the read,
    paused, next rate slot, next lease deadline, next run_at)."""
    now, paused, *times = row
    found = [t for t in times if t is not None]
    return now, None if paused or not found else min(found)
