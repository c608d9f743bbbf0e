"""WorkQueue: the lease queue in memory, every call passing the current time.

Data structures (n = number of tasks):

* ``_tasks``: task id -> record (state, attempts, current lease token, ...).
* ``_line``: a FIFO (deque) of AVAILABLE ids; only ``reserve``/``claim`` take
  from it, and every move to AVAILABLE appends to it.
* ``_leases``: a min-heap of (deadline, token, task id); ``_waiting``: a min-heap
  of (run_at, order, task id).  Tokens and orders come from one counter that
  only grows, so ties in time resolve in the order things happened.  Entries are
  deleted lazily: one that no longer matches its task (completed, failed,
  extended, reserved again, redriven, purged) is dropped when it reaches the top.

Every call of the core contract is O(log n) amortised: each event pushes one
heap entry, and each entry is popped at most once.  Inspection calls (``tasks``,
``dead``, ``redrive`` of all, ``purge``) walk the tasks: O(n).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Iterable
from typing import Any

from . import payload as payloads
from .contract import (
    LEASE_EXPIRED,
    MAX_ID_LENGTH,
    MAX_TIME,
    Number,
    State,
    after_failure,
    check_batch,
    check_count,
    check_error,
    check_leases,
    check_retry,
    check_rng,
    check_seconds,
    check_settings,
    check_start,
    check_states,
    check_task_id,
    check_task_ids,
    check_time,
    check_token,
    first_run,
    time_after,
    undecodable_error,
)
from .errors import InvalidPayload
from .records import Lease, QueueStats, TaskInfo
from .retry import Retry

_RESERVED, _WAITING, _AVAILABLE = State.RESERVED, State.WAITING, State.AVAILABLE
_COMPLETED, _DEAD = State.COMPLETED, State.DEAD
#: State -> its value, a dict hit instead of the enum's ``value`` property.
_VALUE = {state: state.value for state in State}

# The hot calls check ids and times inline for the usual case (a short ASCII str,
# an int or float in range) and leave the rest to contract.check_task_id and
# check_time, which accept exactly the same values and say what is wrong.


class _Task:
    __slots__ = (
        "attempts",
        "created_at",
        "deadline",
        "error",
        "finished_at",
        "order",
        "payload",
        "run_at",
        "state",
        "token",
        "updated_at",
    )

    def __init__(self, payload: payloads.Encoded, now: Number) -> None:
        self.state = _AVAILABLE
        self.attempts = 0
        self.token = 0  # the latest lease's token; 0 before the first
        self.deadline: Number = 0  # meaningful while RESERVED
        self.run_at: Number = 0  # meaningful while WAITING
        self.order = 0  # the counter value of the task's WAITING entry
        self.payload = payload
        self.error: str | None = None
        self.created_at = self.updated_at = now
        self.finished_at: Number | None = None


class WorkQueue:
    """An in-memory lease queue.  Not thread-safe; not durable.

    Time never goes backwards: a call whose ``now`` is below the highest time
    seen so far is handled at that highest time.
    """

    def __init__(
        self,
        lease_seconds: Number,
        max_attempts: int,
        *,
        retry: Retry | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        rng: random.Random | None = None,
    ) -> None:
        self.lease_seconds, self.max_attempts = check_settings(lease_seconds, max_attempts)
        self.retry = check_retry(retry)
        self.max_payload_bytes = payloads.check_limit(max_payload_bytes)
        self._rng = check_rng(rng)
        self._tasks: dict[str, _Task] = {}
        self._line: deque[str] = deque()
        self._leases: list[tuple[Number, int, str]] = []
        self._waiting: list[tuple[Number, int, str]] = []
        self._counter = 0
        self._now: Number = 0

    # --- the core contract --------------------------------------------------------

    def add(
        self,
        task_id: str,
        now: Number,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
    ) -> bool:
        """Put a new task at the back of the line (or WAITING until its delay is over).

        False, and no change, if the id exists in any state.
        """
        if not (type(task_id) is str and 0 < len(task_id) <= MAX_ID_LENGTH and task_id.isascii()):
            task_id = check_task_id(task_id)
        if payload is None and delay is None and run_at is None:  # nothing to encode or wait for
            now = self._advance(now)
            return self._insert(task_id, None, now, now)
        encoded = payloads.encode(payload, self.max_payload_bytes)
        start = check_start(delay, run_at)
        now = self._advance(now)
        return self._insert(task_id, encoded, now, first_run(now, start))

    def reserve(self, now: Number) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available."""
        return self._take(self._advance(now))

    def complete(self, task_id: str, now: Number, *, token: int | None = None) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now.

        With ``token``, only that lease may complete the task; asked again with
        the token of the lease that completed it, the answer is True again.
        """
        if not (type(task_id) is str and 0 < len(task_id) <= MAX_ID_LENGTH and task_id.isascii()):
            task_id = check_task_id(task_id)
        token = None if token is None else check_token(token)
        now = self._advance(now)
        task = self._tasks.get(task_id)
        if task is None:
            return False
        if task.state is not _RESERVED:
            return token is not None and task.state is _COMPLETED and task.token == token
        if token is not None and task.token != token:
            return False
        task.state = _COMPLETED
        task.updated_at = task.finished_at = now
        return True

    def complete_and_claim(
        self, task_id: str, now: Number, *, token: int
    ) -> tuple[bool, Lease | None]:
        """``complete(task_id, token=token)`` and ``claim()`` as one call."""
        token = check_token(token)
        done = self.complete(task_id, now, token=token)
        return done, self._claim(self._now)

    def fail(
        self, task_id: str, now: Number, *, token: int | None = None, error: object = None
    ) -> str | None:
        """Fail a RESERVED task: AVAILABLE again, WAITING for a retry delay, or DEAD.

        None if the task is not RESERVED (or, with ``token``, not under that lease).
        """
        if not (type(task_id) is str and 0 < len(task_id) <= MAX_ID_LENGTH and task_id.isascii()):
            task_id = check_task_id(task_id)
        token = None if token is None else check_token(token)
        text = None if error is None else check_error(error)
        now = self._advance(now)
        task = self._tasks.get(task_id)
        if task is None or task.state is not _RESERVED:
            return None
        if token is not None and task.token != token:
            return None
        return _VALUE[self._end_lease(task_id, task, now, text)]

    def status(self, task_id: str, now: Number) -> str | None:
        """The task's state after due events, or None for an unknown id."""
        if not (type(task_id) is str and 0 < len(task_id) <= MAX_ID_LENGTH and task_id.isascii()):
            task_id = check_task_id(task_id)
        self._advance(now)
        task = self._tasks.get(task_id)
        return None if task is None else _VALUE[task.state]

    # --- leases -------------------------------------------------------------------

    def claim(self, now: Number) -> Lease | None:
        """Like ``reserve``, but returns the whole lease: token, attempt, deadline, payload."""
        now = self._advance(now)
        return self._claim(now)

    def extend(
        self, task_id: str, token: int, now: Number, *, seconds: Number | None = None
    ) -> Number | None:
        """Heartbeat: the lease now ends at ``now + seconds`` (default lease_seconds).

        Returns the new deadline, or None if ``token`` is not the task's current
        lease (it ran out, ended, or another worker holds the task now).
        """
        task_id = check_task_id(task_id)
        token = check_token(token)
        length = self.lease_seconds if seconds is None else check_seconds(seconds, "seconds")
        now = self._advance(now)
        task = self._tasks.get(task_id)
        if task is None or task.state is not _RESERVED or task.token != token:
            return None
        task.deadline = time_after(now, length)
        task.updated_at = now
        heapq.heappush(self._leases, (task.deadline, token, task_id))
        return task.deadline

    def release(self, task_id: str, token: int, now: Number) -> bool:
        """Give a lease back without counting its attempt: the task goes to the back of the line."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        now = self._advance(now)
        task = self._tasks.get(task_id)
        if task is None or task.state is not _RESERVED or task.token != token:
            return False
        task.attempts -= 1
        self._make_available(task_id, task, now)
        return True

    # --- batches --------------------------------------------------------------------

    def add_many(
        self,
        items: Iterable[str | tuple[str, Any]],
        now: Number,
        *,
        delay: Number | None = None,
        run_at: Number | None = None,
    ) -> list[bool]:
        """``add`` for each item (an id, or an (id, payload) pair), as one call."""
        batch = check_batch(items, self.max_payload_bytes)
        start = check_start(delay, run_at)
        now = self._advance(now)
        when = first_run(now, start)
        return [self._insert(task_id, encoded, now, when) for task_id, encoded in batch]

    def claim_many(self, n: int, now: Number) -> list[Lease]:
        """Up to ``n`` leases from the front of the line, as one call."""
        n = check_count(n, "n")
        now = self._advance(now)
        leases: list[Lease] = []
        while len(leases) < n and (lease := self._claim(now)) is not None:
            leases.append(lease)
        return leases

    def complete_many(self, leases: Iterable[Lease | tuple[str, int]], now: Number) -> list[bool]:
        """``complete(task_id, token=token)`` for each lease (or (id, token) pair), as one call."""
        items = check_leases(leases)
        now = self._advance(now)
        return [self.complete(task_id, now, token=token) for task_id, token in items]

    # --- dead letters, retention, inspection ---------------------------------------

    def info(self, task_id: str, now: Number) -> TaskInfo | None:
        """Everything stored about a task, or None."""
        task_id = check_task_id(task_id)
        self._advance(now)
        task = self._tasks.get(task_id)
        return None if task is None else self._info(task_id, task)

    def tasks(self, now: Number, *, state: str | None = None, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` tasks (of one state, if given), in the order they were added."""
        wanted = None if state is None else check_states(state, tuple(State))[0]
        limit = check_count(limit, "limit")
        self._advance(now)
        found = []
        for task_id, task in self._tasks.items():
            if wanted is None or task.state is wanted:
                found.append(self._info(task_id, task))
                if len(found) == limit:
                    break
        return found

    def dead(self, now: Number, *, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` DEAD tasks, the longest dead first."""
        limit = check_count(limit, "limit")
        self._advance(now)
        return [self._info(t, self._tasks[t]) for t in self._dead_ids()[:limit]]

    def redrive(self, now: Number, task_ids: Iterable[str] | None = None) -> int:
        """Send DEAD tasks (the given ones, or all) back to the line with attempts reset.

        Returns how many were redriven; ids that are not DEAD are skipped.
        """
        ids = check_task_ids(task_ids)
        now = self._advance(now)
        count = 0
        for task_id in self._dead_ids() if ids is None else ids:
            task = self._tasks.get(task_id)
            if task is not None and task.state is State.DEAD:
                task.attempts = 0
                task.finished_at = None
                self._make_available(task_id, task, now)
                count += 1
        return count

    def purge(
        self,
        now: Number,
        *,
        states: Iterable[str] = ("COMPLETED",),
        older_than: Number = 0,
    ) -> int:
        """Forget COMPLETED (and/or DEAD) tasks finished at least ``older_than`` seconds ago.

        Returns how many were removed; their ids can be added again.
        """
        chosen = check_states(states, (State.COMPLETED, State.DEAD))
        age = check_seconds(older_than, "older_than")
        now = self._advance(now)
        doomed = [
            t
            for t, task in self._tasks.items()
            if task.state in chosen
            and task.finished_at is not None
            and task.finished_at <= now - age
        ]
        for task_id in doomed:
            del self._tasks[task_id]
        return len(doomed)

    def stats(self, now: Number) -> QueueStats:
        """Counts per state, the age of the front of the line, the next deadlines."""
        now = self._advance(now)
        counts = self.counts()
        front = self._tasks[self._line[0]] if self._line else None
        return QueueStats(
            counts=counts,
            oldest_available_age=None if front is None else now - front.updated_at,
            next_deadline=self._top(self._leases, _RESERVED),
            next_run_at=self._top(self._waiting, _WAITING),
        )

    def ready(self, now: Number) -> bool:
        """Would ``claim`` find a task now?  Changes nothing (the next call does)."""
        now = max(check_time(now), self._now)
        return bool(self._line) or any(
            (top := self._top(heap, state)) is not None and top <= now
            for heap, state in ((self._leases, _RESERVED), (self._waiting, _WAITING))
        )

    def counts(self) -> dict[str, int]:
        """Tasks per state, as of the last call."""
        counts = dict.fromkeys((s.value for s in State), 0)
        for task in self._tasks.values():
            counts[task.state.value] += 1
        return counts

    # --- internals --------------------------------------------------------------

    def _advance(self, now: Number) -> Number:
        """Apply the time high-water mark, then every lease expiry and wake-up due by then.

        Events run in (time, counter) order, so that the line fills in the order
        things became due, whatever the kind of event.
        """
        if not ((type(now) is int or type(now) is float) and 0 <= now <= MAX_TIME):
            now = check_time(now)
        if now < self._now:
            now = self._now
        self._now = now
        leases, waiting = self._leases, self._waiting
        if (leases and leases[0][0] <= now) or (waiting and waiting[0][0] <= now):
            self._run_due(now)
        return now

    def _run_due(self, now: Number) -> None:
        """Every lease expiry and wake-up due by ``now``, in (time, counter) order."""
        leases, waiting, tasks = self._leases, self._waiting, self._tasks
        while (leases and leases[0][0] <= now) or (waiting and waiting[0][0] <= now):
            if waiting and (not leases or waiting[0][:2] < leases[0][:2]):
                run_at, order, task_id = heapq.heappop(waiting)
                task = tasks.get(task_id)
                if task is not None and task.state is _WAITING and task.order == order:
                    self._make_available(task_id, task, run_at)
            else:
                deadline, token, task_id = heapq.heappop(leases)
                task = tasks.get(task_id)
                if (
                    task is not None
                    and task.state is _RESERVED
                    and task.token == token
                    and task.deadline == deadline
                ):
                    self._end_lease(task_id, task, deadline, LEASE_EXPIRED)

    def _next(self) -> int:
        self._counter += 1
        return self._counter

    def _insert(self, task_id: str, encoded: payloads.Encoded, now: Number, run_at: Number) -> bool:
        if task_id in self._tasks:
            return False
        task = self._tasks[task_id] = _Task(encoded, now)
        if run_at > now:
            self._make_waiting(task_id, task, run_at, now)
        else:
            self._counter += 1  # the line position, as the database numbers it
            self._line.append(task_id)
        return True

    def _take(self, now: Number) -> str | None:
        """Lease the front of the line: the task's id, or None if the line is empty."""
        if not self._line:
            return None
        task_id = self._line.popleft()
        task = self._tasks[task_id]
        task.state = _RESERVED
        task.attempts += 1
        self._counter += 1
        task.token = token = self._counter
        task.deadline = deadline = time_after(now, self.lease_seconds)
        task.updated_at = now
        heapq.heappush(self._leases, (deadline, token, task_id))
        return task_id

    def _claim(self, now: Number) -> Lease | None:
        """Lease the front of the line; a task whose payload cannot be decoded is
        dead-lettered on the way (see contract.undecodable_error)."""
        while self._line:
            task_id = self._line[0]
            task = self._tasks[task_id]
            try:  # before the lease is taken: a RecursionError (short of stack) changes nothing
                payload = payloads.decode(task.payload)
            except InvalidPayload as exc:
                self._take(now)
                task.state = _DEAD
                task.attempts = self.max_attempts
                task.error = undecodable_error(exc)
                task.finished_at = now
                continue
            self._take(now)
            return Lease(task_id, task.token, task.attempts, task.deadline, payload)
        return None

    def _end_lease(self, task_id: str, task: _Task, when: Number, error: str | None) -> State:
        """A failed or expired attempt at time ``when``: retry now, retry later, or DEAD."""
        retry = self.retry
        delay = 0 if retry.kind == "immediate" else retry.delay(task.attempts, self._rng)
        state = after_failure(task.attempts, self.max_attempts, delay)
        task.error = error
        if state is _AVAILABLE:
            self._make_available(task_id, task, when)
        elif state is _WAITING:
            self._make_waiting(task_id, task, time_after(when, delay), when)
        else:
            task.state = State.DEAD
            task.updated_at = task.finished_at = when
        return state

    def _make_available(self, task_id: str, task: _Task, now: Number) -> None:
        task.state = _AVAILABLE
        task.updated_at = now
        self._counter += 1
        self._line.append(task_id)

    def _make_waiting(self, task_id: str, task: _Task, run_at: Number, now: Number) -> None:
        task.state = _WAITING
        task.run_at = run_at
        task.order = self._next()
        task.updated_at = now
        heapq.heappush(self._waiting, (task.run_at, task.order, task_id))

    def _top(self, heap: list[tuple[Number, int, str]], state: State) -> Number | None:
        """The soonest live entry of a heap, dropping stale entries on the way."""
        while heap:
            when, key, task_id = heap[0]
            task = self._tasks.get(task_id)
            if task is not None and task.state is state:
                if state is _RESERVED and task.token == key and task.deadline == when:
                    return when
                if state is _WAITING and task.order == key:
                    return when
            heapq.heappop(heap)
        return None

    def _dead_ids(self) -> list[str]:
        dead = [
            (t.finished_at, i, tid)
            for i, (tid, t) in enumerate(self._tasks.items())
            if t.state is State.DEAD
        ]
        return [tid for _, _, tid in sorted(dead)]

    def _info(self, task_id: str, task: _Task) -> TaskInfo:
        return TaskInfo(
            task_id=task_id,
            state=task.state.value,
            attempts=task.attempts,
            max_attempts=self.max_attempts,
            payload=payloads.readable(task.payload),
            last_error=task.error,
            token=task.token or None,
            deadline=task.deadline if task.state is _RESERVED else None,
            run_at=task.run_at if task.state is _WAITING else None,
            created_at=task.created_at,
            updated_at=task.updated_at,
            finished_at=task.finished_at,
        )
