"""WorkQueue's leases: claiming, completing, failing, extending, releasing and
reporting progress, one at a time and in batches."""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from .. import payload as payloads
from ..contract import (
    Completion,
    Number,
    check_count,
    check_error,
    check_failures,
    check_flag,
    check_progress,
    check_result,
    check_seconds,
    check_task_id,
    check_token,
    time_after,
)
from ..contract.leases import check_leases
from ..records import Heartbeat, Lease
from .engine import Engine
from .layout import (
    _ATTEMPTS,
    _CANCELLED,
    _COMPLETED,
    _DEAD,
    _ERROR,
    _FINISHED,
    _RESERVED,
    _STATE,
    _STOP,
    _TOKEN,
    _UPDATED,
    _WHEN,
    _finish,
    _kill,
)


class Leasing(Engine):
    """The calls of a lease's life, from its claim to its end."""

    def reserve(self, now: Number) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available."""
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        return self._take(now)

    def complete(
        self, task_id: str, now: Number, *, token: int | None = None, result: Any = None
    ) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now.

        With ``token``, only that lease may complete the task; asked again with
        the token of the lease that completed it, the answer is True again (the
        first ``result`` stays).  ``result`` (a JSON value) is stored with the
        task: see ``result``.
        """
        record = self._tasks.get(task_id) if type(task_id) is str else None
        if record is None:
            task_id = check_task_id(task_id)
            record = self._tasks.get(task_id)
        if token is not None:
            token = check_token(token)
        if result is not None:  # from here on, the result as stored
            result = check_result(result, self.max_payload_bytes)
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        if record is None:
            return False
        state = record[_STATE]
        if state is not _RESERVED:
            return token is not None and state is _COMPLETED and record[_TOKEN] == token
        if token is not None and record[_TOKEN] != token:
            return False
        if not self._plain:
            self._free_slot(record)
        record[_STATE] = _COMPLETED
        record[_UPDATED] = record[_FINISHED] = now
        if result is not None:
            self._results[task_id] = result
        return True

    def complete_and_claim(
        self, task_id: str, now: Number, *, token: int, result: Any = None
    ) -> tuple[bool, Lease | None]:
        """``complete(task_id, token=token, result=result)`` and ``claim()`` as one call."""
        token = check_token(token)
        done = self.complete(task_id, now, token=token, result=result)
        return done, self._claim(self._now)

    def fail(
        self,
        task_id: str,
        now: Number,
        *,
        token: int | None = None,
        error: object = None,
        retry: bool = True,
    ) -> str | None:
        """Fail a RESERVED task: AVAILABLE again, WAITING for a retry delay, or DEAD.

        None if the task is not RESERVED (or, with ``token``, not under that lease).
        With ``retry=False`` the task goes DEAD at once, its attempts all used.
        """
        record = self._tasks.get(task_id) if type(task_id) is str else None
        if record is None:
            task_id = check_task_id(task_id)
            record = self._tasks.get(task_id)
        if token is not None:
            token = check_token(token)
        text = None if error is None else check_error(error)
        if retry is not True:
            retry = check_flag(retry, "retry")
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        if record is None or record[_STATE] is not _RESERVED:
            return None
        if token is not None and record[_TOKEN] != token:
            return None
        if not retry and record[_STOP] is None:
            self._free_slot(record)
            _kill(record, now, text)
            return _DEAD
        return self._end_lease(task_id, record, now, text)

    def claim(self, now: Number) -> Lease | None:
        """Like ``reserve``, but returns the whole lease: token, attempt, deadline, payload."""
        return self._claim(self._advance(now))

    def extend(
        self, task_id: str, token: int, now: Number, *, seconds: Number | None = None
    ) -> Number | None:
        """Heartbeat: the lease now ends at ``now + seconds`` (default lease_seconds).

        Returns the new deadline, or None if ``token`` is not the task's current
        lease (it ran out, ended, or another worker holds the task now).
        """
        beat = self.heartbeat(task_id, token, now, seconds=seconds)
        return None if beat is None else beat.deadline

    def heartbeat(
        self, task_id: str, token: int, now: Number, *, seconds: Number | None = None
    ) -> Heartbeat | None:
        """``extend``, answering also whether the task was asked to stop (``cancel``)."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        length = self.lease_seconds if seconds is None else check_seconds(seconds, "seconds")
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:
            return None
        record[_WHEN] = deadline = time_after(now, length)
        record[_UPDATED] = now
        heapq.heappush(self._extended, (deadline, token, task_id))
        self._due = min(self._due, deadline)
        return Heartbeat(deadline, record[_STOP] is not None)

    def release(self, task_id: str, token: int, now: Number) -> bool:
        """Give a lease back without counting its attempt: the task goes to the back of the line."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:
            return False
        self._free_slot(record)
        if record[_STOP] is not None:  # asked to stop: it runs no more (rules.released)
            _finish(record, _CANCELLED, now, record[_ERROR])
            return True
        record[_ATTEMPTS] -= 1
        self._make_available(task_id, record, now)
        return True

    def claim_many(self, n: int, now: Number) -> list[Lease]:
        """Up to ``n`` leases from the front of the line, as one call."""
        n = check_count(n, "n")
        now = self._advance(now)
        leases: list[Lease] = []
        while len(leases) < n and (lease := self._claim(now)) is not None:
            leases.append(lease)
        return leases

    def complete_many(
        self, leases: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]], now: Number
    ) -> list[bool]:
        """``complete(task_id, token=token)`` for each lease (or (id, token) pair, or
        (id, token, result) triple), as one call."""
        items = check_leases(leases, self.max_payload_bytes)
        now = self._advance(now)
        return self._complete_many(items, now)

    def _complete_many(self, items: list[Completion], now: Number) -> list[bool]:
        """complete each (id, token, stored result), all checked already (a result is
        decoded for complete to store again: only a completion with one pays)."""
        return [
            self.complete(
                task_id,
                now,
                token=token,
                result=None if stored is None else payloads.decode(stored),
            )
            for task_id, token, stored in items
        ]

    def settle_and_claim(
        self,
        n: int,
        now: Number,
        *,
        completed: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]] = (),
        failed: Iterable[tuple[str, int, object] | tuple[str, int, object, bool]] = (),
    ) -> tuple[list[bool], list[str | None], list[Lease]]:
        """``complete`` each of ``completed`` (Leases, (id, token) pairs or (id, token,
        result) triples), ``fail`` each of ``failed`` (id, token, error), then claim
        up to ``n`` (0 to MAX_BATCH), as one call."""
        n = check_count(n, "n", least=0)
        done_items = check_leases(completed, self.max_payload_bytes, "completed")
        fail_items = check_failures(failed)
        now = self._advance(now)
        done = self._complete_many(done_items, now)
        states = [
            self.fail(task_id, now, token=token, error=text, retry=retry)
            for task_id, token, text, retry in fail_items
        ]
        return done, states, self.claim_many(n, now) if n else []

    def progress(
        self,
        task_id: str,
        token: int,
        value: Number | None = None,
        message: str | None = None,
        *,
        now: Number,
    ) -> bool:
        """Report the progress of a running task: a number (on a scale of the
        handler's own) and/or a message, shown by ``info``.  False, and no change,
        if ``token`` is not the task's current lease (as ``extend``)."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        report = check_progress(value, message)
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:
            return False
        self._progress[task_id] = report
        record[_UPDATED] = now
        return True
