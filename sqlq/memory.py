"""WorkQueue: the lease queue in memory, every call passing the current time.

Data structures (n = number of tasks):

* ``_tasks``: task id -> record (state, attempts, current lease id).
* ``_line``: a FIFO (deque) of AVAILABLE ids; only ``reserve`` takes from it,
  only ``add``, ``fail`` and expiry append to it.
* ``_leases``: a min-heap of (deadline, lease id, task id).  A lease id is
  handed out per reservation and only grows, so equal deadlines expire in the
  order they were reserved.  Entries are deleted lazily: an entry whose lease
  id is no longer the task's current lease (the task was completed, failed or
  reserved again) is dropped when it reaches the top.

Every call is O(log n) amortised: each reservation pushes one heap entry and
each entry is popped at most once.
"""

from __future__ import annotations

import heapq
from collections import deque

from .contract import Number, State, after_failure, check_settings, check_task_id, check_time


class _Task:
    __slots__ = ("attempts", "lease", "state")

    def __init__(self) -> None:
        self.state = State.AVAILABLE
        self.attempts = 0
        self.lease = 0  # id of the current lease while RESERVED; 0 otherwise


class WorkQueue:
    """An in-memory lease queue.  Not thread-safe; not durable.

    Time never goes backwards: a call whose ``now`` is below the highest time
    seen so far is handled at that highest time.
    """

    def __init__(self, lease_seconds: Number, max_attempts: int) -> None:
        self.lease_seconds, self.max_attempts = check_settings(lease_seconds, max_attempts)
        self._tasks: dict[str, _Task] = {}
        self._line: deque[str] = deque()
        self._leases: list[tuple[Number, int, str]] = []
        self._last_lease = 0
        self._now: Number = 0

    # --- the contract -------------------------------------------------------------

    def add(self, task_id: str, now: Number) -> bool:
        """Put a new task at the back of the line; False if the id exists in any state."""
        task_id = check_task_id(task_id)
        self._advance(now)
        if task_id in self._tasks:
            return False
        self._tasks[task_id] = _Task()
        self._line.append(task_id)
        return True

    def reserve(self, now: Number) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available."""
        now = self._advance(now)
        if not self._line:
            return None
        task_id = self._line.popleft()
        task = self._tasks[task_id]
        self._last_lease += 1
        task.state = State.RESERVED
        task.attempts += 1
        task.lease = self._last_lease
        heapq.heappush(self._leases, (now + self.lease_seconds, task.lease, task_id))
        return task_id

    def complete(self, task_id: str, now: Number) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now."""
        task_id = check_task_id(task_id)
        self._advance(now)
        task = self._tasks.get(task_id)
        if task is None or task.state is not State.RESERVED:
            return False
        task.state = State.COMPLETED
        task.lease = 0
        return True

    def fail(self, task_id: str, now: Number) -> str | None:
        """Fail a RESERVED task: back of the line, or DEAD once max_attempts are used."""
        task_id = check_task_id(task_id)
        self._advance(now)
        task = self._tasks.get(task_id)
        if task is None or task.state is not State.RESERVED:
            return None
        return self._release(task_id, task).value

    def status(self, task_id: str, now: Number) -> str | None:
        """The task's state after due leases expired, or None for an unknown id."""
        task_id = check_task_id(task_id)
        self._advance(now)
        task = self._tasks.get(task_id)
        return None if task is None else task.state.value

    # --- internals --------------------------------------------------------------

    def _advance(self, now: Number) -> Number:
        """Apply the time high-water mark, then expire every lease due at or before it."""
        now = check_time(now)
        if now < self._now:
            now = self._now
        self._now = now
        leases = self._leases
        while leases and leases[0][0] <= now:
            _, lease, task_id = heapq.heappop(leases)
            task = self._tasks[task_id]
            if task.lease == lease:  # else a stale entry of an earlier reservation
                self._release(task_id, task)
        return now

    def _release(self, task_id: str, task: _Task) -> State:
        task.state = after_failure(task.attempts, self.max_attempts)
        task.lease = 0
        if task.state is State.AVAILABLE:
            self._line.append(task_id)
        return task.state
