"""WorkQueue's reads: a task's state, result and record, the lists of tasks, and the
queue's figures."""

from __future__ import annotations

from typing import Any

from .. import payload as payloads
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
from .engine import Engine
from .layout import (
    _ATTEMPTS,
    _CREATED,
    _ERROR,
    _FINISHED,
    _GROUP,
    _MAX_ATTEMPTS,
    _NAME,
    _PAYLOAD,
    _PRIORITY,
    _RESERVED,
    _STATE,
    _STOP,
    _TOKEN,
    _UPDATED,
    _WAITING,
    _WHEN,
    Record,
)


class Inspection(Engine, ResultWaiting):
    """status, result, wait_for_result, info, tasks, dead, stats, ready, counts."""

    def status(self, task_id: str, now: Number) -> str | None:
        """The task's state after due events, or None for an unknown id."""
        record = self._tasks.get(task_id) if type(task_id) is str else None
        if record is None:
            record = self._tasks.get(check_task_id(task_id))
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            self._advance(now)
        return None if record is None else record[_STATE]

    def result(self, task_id: str, now: Number) -> Any:
        """The result stored with a COMPLETED task (None if it was completed without
        one).  NoResult if the id is unknown or the task is not COMPLETED; TaskDead
        (a NoResult with the last error) if it is DEAD."""
        task_id = check_task_id(task_id)
        self._advance(now)
        return result_of(task_id, self._outcome(task_id))

    def _outcome(self, task_id: str) -> Outcome | None:
        record = self._tasks.get(task_id)
        if record is None:
            return None
        return record[_STATE], self._results.get(task_id), record[_ERROR]

    def info(self, task_id: str, now: Number) -> TaskInfo | None:
        """Everything stored about a task, or None."""
        task_id = check_task_id(task_id)
        self._advance(now)
        record = self._tasks.get(task_id)
        return None if record is None else self._info(task_id, record)

    def tasks(self, now: Number, *, state: str | None = None, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` tasks (of one state, if given), in the order they were added."""
        wanted = None if state is None else check_states(state, tuple(State))[0].value
        limit = check_count(limit, "limit")
        self._advance(now)
        found = []
        for task_id, record in self._tasks.items():
            if wanted is None or record[_STATE] is wanted:
                found.append(self._info(task_id, record))
                if len(found) == limit:
                    break
        return found

    def dead(self, now: Number, *, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` DEAD tasks, the longest dead first."""
        limit = check_count(limit, "limit")
        self._advance(now)
        return [self._info(t, self._tasks[t]) for t in self._dead_ids()[:limit]]

    def stats(self, now: Number) -> QueueStats:
        """Counts per state, the age of the front of the line, the next deadlines."""
        now = self._advance(now)
        counts = self.counts()
        first = min(self._line_fronts(), default=None)
        front = None if first is None else self._tasks[first[2]]
        waking = self._waiting[0][0] if self._waiting else None
        return QueueStats(
            counts=counts,
            oldest_available_age=None if front is None else now - front[_UPDATED],
            next_deadline=self._next_deadline(),
            next_run_at=waking,
            paused=self._paused,
        )

    def ready(self, now: Number) -> bool:
        """Would ``claim`` find a task now?  Changes nothing (the next call does)."""
        now = max(check_time(now), self._now)
        if self._paused:
            return False
        if self._line or (self._waiting and self._waiting[0][0] <= now):
            return True
        if self._groups and self._ready_group(now) is not None:
            return True
        deadline = self._next_deadline()
        return deadline is not None and deadline <= now

    def counts(self) -> dict[str, int]:
        """Tasks per state, as of the last call."""
        counts = dict.fromkeys((s.value for s in State), 0)
        for record in self._tasks.values():
            counts[record[_STATE]] += 1
        return counts

    def _info(self, task_id: str, record: Record) -> TaskInfo:
        state = record[_STATE]
        progress, message = self._progress.get(task_id, (None, None))
        return TaskInfo(
            task_id=task_id,
            state=state,
            attempts=record[_ATTEMPTS],
            max_attempts=record[_MAX_ATTEMPTS],
            payload=payloads.readable(record[_PAYLOAD]),
            last_error=record[_ERROR],
            token=record[_TOKEN] or None,
            deadline=record[_WHEN] if state is _RESERVED else None,
            run_at=record[_WHEN] if state is _WAITING else None,
            created_at=record[_CREATED],
            updated_at=record[_UPDATED],
            finished_at=record[_FINISHED],
            name=record[_NAME],
            stop_requested_at=record[_STOP],
            result=payloads.readable(self._results.get(task_id)),
            progress=progress,
            progress_message=message,
            group=record[_GROUP],
            key=self._key_of.get(task_id),
            priority=record[_PRIORITY],
        )
