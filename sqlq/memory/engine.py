"""WorkQueue's engine: the time high-water mark and the due events (lease expiries,
wake-ups), a new task's insert, taking a lease and ending one."""

from __future__ import annotations

import heapq
from typing import Any

from .. import payload as payloads
from ..contract import (
    LEASE_EXPIRED,
    MAX_TIME,
    Number,
    check_max_attempts,
    check_retry,
    check_time,
    time_after,
    undecodable_error,
)
from ..errors import InvalidPayload
from ..records import Lease
from ..retry import Retry
from .layout import (
    _ATTEMPTS,
    _AVAILABLE,
    _CANCELLED,
    _DEAD,
    _ERROR,
    _FINISHED,
    _MAX_ATTEMPTS,
    _NAME,
    _NEVER,
    _PAYLOAD,
    _RESERVED,
    _RETRY,
    _STATE,
    _STOP,
    _TOKEN,
    _UPDATED,
    _WAITING,
    _WHEN,
    Entry,
    Record,
    _finish,
    _kill,
    _stored,
)
from .lines import Lines


class Engine(Lines):
    """What every call runs on: _advance first, then the moves of tasks."""

    def _advance(self, now: Number) -> Number:
        """Check ``now`` and apply the time high-water mark; then run every lease
        expiry and wake-up due by then, in (time, counter) order, and set ``_due``
        to the time of the soonest entry left.  Returns the time the call is
        handled at.  (The sooner of the two heaps' fronts is kept while neither heap
        changes, so that each entry costs one comparison of tuples, not two.)"""
        if not ((type(now) is int or type(now) is float) and 0 <= now <= MAX_TIME):
            now = check_time(now)
        if now < self._now:
            now = self._now
        self._now = now
        if now < self._due:
            return now
        tasks, leases = self._tasks, self._leases
        other = None  # the sooner of the two heaps' fronts (None: to be found again)
        while True:
            if other is None:
                extended, waiting = self._extended, self._waiting
                other = extended[0] if extended else _NEVER
                if waiting and waiting[0] < other:
                    other = waiting[0]
            first = leases[0] if leases else _NEVER  # the soonest entry
            if other < first:
                first = other
            when, key, task_id = first
            if when > now:
                break
            if first is not other:
                leases.popleft()
            else:
                other = None
                if waiting and first is waiting[0]:  # a wake-up: never stale (see layout.py)
                    heapq.heappop(waiting)
                    self._make_available(task_id, tasks[task_id], when)
                    continue
                heapq.heappop(extended)
            record = tasks.get(task_id)
            if (
                record is not None
                and record[_STATE] is _RESERVED
                and record[_TOKEN] == key
                and record[_WHEN] == when
                and self._end_lease(task_id, record, when, LEASE_EXPIRED) is _WAITING
            ):
                other = None  # its retry's wake-up may be the soonest now
        self._due = when if when < MAX_TIME else MAX_TIME
        return now

    def _policy(self, max_attempts: object, retry: object) -> tuple[int, Retry | None]:
        """A new task's max_attempts and retry policy (as records keep it): the queue's,
        or the call's own."""
        return (
            self.max_attempts if max_attempts is None else check_max_attempts(max_attempts),
            self._retry if retry is None else _stored(check_retry(retry)),
        )

    def _insert(self, task_id: str, task: tuple[Any, ...], now: Number, run_at: Number) -> bool:
        """Add a task: ``task`` is (encoded payload, name, max_attempts, stored retry,
        priority, group)."""
        tasks = self._tasks
        if task_id in tasks:
            return False
        encoded, name, max_attempts, retry, priority, group = task
        record = tasks[task_id] = [_AVAILABLE, 0, 0, 0, encoded, None, now, now, None,
                                   max_attempts, retry, name, None, priority, group, 0]  # fmt: skip
        if priority or group is not None:
            self._plain = False
            if group is not None and group not in self._groups:
                self._make_group(group)
        if run_at > now:
            self._make_waiting(task_id, record, run_at, now)
        else:
            self._join_line(task_id, record)
        return True

    def _take(self, now: Number) -> str | None:
        """Lease the front of the line: the task's id, or None if the line is empty."""
        if self._plain:  # the seed's line: one FIFO
            if not self._line:
                return None
            task_id = self._line.popleft()
        elif not self._groups:
            line = self._line
            if not line or self._paused:
                return None
            task_id = self._pop_line() if self._others else line.popleft()
        elif self._paused or (task_id := self._take_front(now)) is None:  # type: ignore[assignment]
            return None
        record = self._tasks[task_id]
        self._counter = token = self._counter + 1
        deadline = now + self.lease_seconds
        if deadline > MAX_TIME:  # time_after, inline
            deadline = MAX_TIME
        record[_STATE] = _RESERVED
        record[_ATTEMPTS] += 1
        record[_TOKEN] = token
        record[_WHEN] = deadline
        record[_UPDATED] = now
        self._leases.append((deadline, token, task_id))
        if deadline < self._due:
            self._due = deadline
        return task_id

    def _claim(self, now: Number) -> Lease | None:
        """Lease the front of the line; a task whose payload cannot be decoded is
        dead-lettered on the way (see contract.undecodable_error)."""
        while not self._paused:
            if self._groups:
                front = self._front(now)
                if front is None:
                    return None
                task_id = front[0]
            elif self._line:
                task_id = self._line_head()
            else:
                return None
            record = self._tasks[task_id]
            try:  # before the lease is taken: a RecursionError (short of stack) changes nothing
                payload = payloads.decode(record[_PAYLOAD])
            except InvalidPayload as exc:
                self._take(now)
                self._free_slot(record)
                _kill(record, now, undecodable_error(exc))
                continue
            self._take(now)
            return Lease(
                task_id, record[_TOKEN], record[_ATTEMPTS], record[_WHEN], payload, record[_NAME]
            )
        return None

    def _end_lease(self, task_id: str, record: Record, when: Number, error: str | None) -> str:
        """A failed or expired attempt at time ``when``: retry now, retry later, or DEAD
        (rules.lease_end's rule and _make_available, written out: this runs for
        every expiry, and calling lease_end here cost about 6.5% of a mixed call,
        callgrind; see sqlq/rules.py.  WorkQueue is the oracle the property tests hold Queue,
        which calls rules.lease_end, to, call by call)."""
        if not self._plain:
            self._free_slot(record)
            if record[_STOP] is not None:  # asked to stop: it runs no more
                _finish(record, _CANCELLED, when, error)
                return _CANCELLED
        attempts = record[_ATTEMPTS]
        retry = record[_RETRY]
        delay = 0 if retry is None else retry.delay(attempts, self._rng)
        record[_ERROR] = error
        record[_UPDATED] = when
        if attempts >= record[_MAX_ATTEMPTS]:
            record[_STATE] = _DEAD
            record[_FINISHED] = when
            return _DEAD
        if delay > 0:
            self._make_waiting(task_id, record, time_after(when, delay), when)
            return _WAITING
        record[_STATE] = _AVAILABLE
        if self._plain:  # _join_line, written out for a plain queue (see layout._SEQ)
            self._counter += 1
            record[_WHEN] = self._now
            self._line.append(task_id)
        else:
            self._join_line(task_id, record)
        return _AVAILABLE

    def _next_deadline(self) -> Number | None:
        """The soonest deadline of a live lease, dropping stale entries on the way."""
        leases, extended = self._leases, self._extended
        while leases and not self._live(leases[0]):
            leases.popleft()
        while extended and not self._live(extended[0]):
            heapq.heappop(extended)
        return min((entries[0][0] for entries in (leases, extended) if entries), default=None)

    def _live(self, entry: Entry) -> bool:
        """Is this lease entry the task's current lease, with its current deadline?
        (``_advance`` writes the same test out: a call per expiry costs ~4% of a call.)"""
        deadline, token, task_id = entry
        record = self._tasks.get(task_id)
        return (
            record is not None
            and record[_STATE] is _RESERVED
            and record[_TOKEN] == token
            and record[_WHEN] == deadline
        )

    def _dead_ids(self) -> list[str]:
        dead = [
            (r[_FINISHED], i, tid)
            for i, (tid, r) in enumerate(self._tasks.items())
            if r[_STATE] is _DEAD
        ]
        return [tid for _, _, tid in sorted(dead)]
