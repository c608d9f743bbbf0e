"""Queue's reads: a task's state, result and record, the lists of tasks, and the
queue's figures (some in a write transaction, so that what is due happens first;
some reading only)."""

from __future__ import annotations

from typing import Any

from .. import payload as payloads
from ..backend import Figures, TaskRow
from ..contract import (
    Number,
    Outcome,
    State,
    check_count,
    check_states,
    check_task_id,
    check_time,
    result_of,
)
from ..records import QueueStats, TaskInfo
from ..results import ResultWaiting
from .calls import Calls


class Inspection(Calls, ResultWaiting):
    """status, result, info, tasks, dead; stats, snapshot, ready, next_due, counts."""

    def status(self, task_id: str, now: Number | None = None) -> str | None:
        """The task's state after due events, or None for an unknown id."""
        task_id = check_task_id(task_id)
        with self._call(now, one_write=True) as tx:
            task = tx.get(self.queue, task_id)
            return None if task is None else task.state.value

    def result(self, task_id: str, now: Number | None = None) -> Any:
        """The result stored with a COMPLETED task (None if it was completed without
        one).  NoResult if the id is unknown or the task is not COMPLETED; TaskDead
        (a NoResult with the last error) if it is DEAD."""
        task_id = check_task_id(task_id)
        return result_of(task_id, self._outcome(task_id, now))

    def _outcome(self, task_id: str, now: Number | None = None) -> Outcome | None:
        """(state, stored result, last error) of the task after due events, or None."""
        with self._call(now, one_write=True) as tx:
            return tx.outcome(self.queue, task_id)

    def info(self, task_id: str, now: Number | None = None) -> TaskInfo | None:
        """Everything stored about a task, or None."""
        task_id = check_task_id(task_id)
        with self._call(now, one_write=True) as tx:
            task = tx.get(self.queue, task_id)
            return None if task is None else _info(task)

    def tasks(
        self, now: Number | None = None, *, state: str | None = None, limit: int = 100
    ) -> list[TaskInfo]:
        """Up to ``limit`` tasks (of one state, if given), in the order they were added."""
        wanted = None if state is None else check_states(state, tuple(State))[0]
        limit = check_count(limit, "limit")
        with self._call(now) as tx:
            return [_info(task) for task in tx.tasks(self.queue, wanted, limit)]

    def dead(self, now: Number | None = None, *, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` DEAD tasks, the longest dead first."""
        limit = check_count(limit, "limit")
        with self._call(now) as tx:
            found = (tx.get(self.queue, task_id) for _, task_id in tx.dead_ids(self.queue, limit))
            return [_info(task) for task in found if task is not None]

    def stats(self, now: Number | None = None) -> QueueStats:
        """Counts per state, the age of the front of the line, the next deadlines."""
        with self._call(now) as tx:
            return self._stats(tx.stats(self.queue), tx.now)

    def snapshot(self, now: Number | None = None) -> QueueStats:
        """``stats()`` as last written: reads only, in one snapshot, and takes no
        write lock (for a worker's periodic summary, or a watch).  Nothing due is
        applied, so a lease that ran out counts as RESERVED until the next call.
        Counting the tasks per state reads every task of the queue."""
        at = check_time(self._clock() if now is None else now)
        return self._stats(self._backend.snapshot(self.queue), at)

    def _stats(self, figures: Figures, now: Number) -> QueueStats:
        counts, front, deadline, run_at, paused = figures
        return QueueStats(
            counts=counts,
            oldest_available_age=None if front is None else max(0, now - front),
            next_deadline=deadline,
            next_run_at=run_at,
            wal_bytes=self._backend.storage_facts().wal_bytes,
            paused=paused,
        )

    def ready(self, now: Number | None = None) -> bool:
        """Would ``claim`` find a task now?  Reads only and takes no write lock, so
        idle workers can poll cheaply; changes nothing (the next call does)."""
        return self._backend.ready(self.queue, self._reading(now))

    def _reading(self, now: Number | None) -> Number | None:
        """The time of a read: ``now``, or the clock's (None: the database's)."""
        if now is not None:
            return check_time(now)
        return None if self._server_time else check_time(self._clock())

    def next_due(self, now: Number | None = None) -> float | None:
        """Seconds from ``now`` (the queue's time, as ``ready`` reads it) until the queue
        has a task due that a claim does not find before then: the next rate slot of
        a limited group (sqlq.Limit), the next lease to run out, the next WAITING task
        due; 0 if one is due already, None if the queue is paused or holds nothing
        back by time.  Reads only and takes no write lock: an idle Worker waits until
        then at most, not for its next poll.  Tasks added meanwhile are not foretold
        (``on_new_tasks`` announces them where it can)."""
        at, due = self._backend.next_due(self.queue, self._reading(now))
        return None if due is None else max(0.0, float(due - at))

    def counts(self) -> dict[str, int]:
        """Tasks of this queue per state, as of the last call (reads only)."""
        found = self._backend.counts().get(self.queue, {})
        return {state.value: found.get(state.value, 0) for state in State}


def _info(task: TaskRow) -> TaskInfo:
    """The row as TaskInfo shows it: the fields both have by name, the payload and the
    result readable, the state's name, and ``key`` for the row's ``dedupe_key``; what
    only the store uses (``row_id``, ``seq``, ``retry``) left out."""
    fields = task._asdict()
    for stored in _STORED_ONLY:
        del fields[stored]
    fields["state"] = task.state.value
    fields["payload"] = payloads.readable(task.payload)
    fields["result"] = payloads.readable(task.result)
    fields["key"] = fields.pop("dedupe_key")
    return TaskInfo(**fields)


#: The fields of a TaskRow that a TaskInfo does not show.
_STORED_ONLY = ("row_id", "seq", "retry")
