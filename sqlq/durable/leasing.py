"""Queue's leases: claiming, completing, failing, extending, releasing and reporting
progress, one at a time and in batches."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..backend import Transaction
from ..contract import (
    Completion,
    Number,
    State,
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
from ..rules import released
from .calls import Calls
from .engine import _kill

if TYPE_CHECKING:  # the backend loads SQLAlchemy when a Queue opens its database
    import sqlalchemy as sa


class Leasing(Calls):
    """The calls of a lease's life, from its claim to its end."""

    def reserve(self, now: Number | None = None) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available.

        Only the id is handed out: the payload is not read (nor decoded).
        """
        with self._call(now) as tx:
            claimed = tx.claim(self.queue, self.lease_seconds, self.fair)
            return None if claimed is None else claimed[0]

    def complete(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        token: int | None = None,
        conn: sa.Connection | None = None,
        result: Any = None,
    ) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now.

        With ``token``, only that lease may complete the task; asked again with
        the token of the lease that completed it, the answer is True again (so a
        retry after an unknown outcome is safe; the first ``result`` stays).  With
        ``conn``, the completion commits or rolls back with the caller's
        transaction.  ``result`` (a JSON value) is stored with the task: see
        ``result``.
        """
        task_id = check_task_id(task_id)
        token = None if token is None else check_token(token)
        stored = None if result is None else check_result(result, self.max_payload_bytes)
        with self._call(now, conn, one_write=True) as tx:
            if tx.complete(self.queue, task_id, token, stored):
                return True
            return token is not None and self._completed_by(tx, task_id, token)

    def _completed_by(self, tx: Transaction, task_id: str, token: int) -> bool:
        """Did the lease ``token`` complete the task (a retried complete)?"""
        task = tx.get(self.queue, task_id)
        return task is not None and task.state is State.COMPLETED and task.token == token

    def complete_and_claim(
        self, task_id: str, now: Number | None = None, *, token: int, result: Any = None
    ) -> tuple[bool, Lease | None]:
        """``complete(task_id, token=token, result=result)`` and ``claim()`` in one
        transaction.

        A worker that finishes a task and wants the next pays for one commit
        instead of two (one fsync per task under ``synchronous="full"``).  Returns
        what ``complete`` would and the new lease (claimed either way).
        """
        task_id = check_task_id(task_id)
        token = check_token(token)
        stored = None if result is None else check_result(result, self.max_payload_bytes)
        with self._call(now) as tx:
            done = tx.complete(self.queue, task_id, token, stored) or self._completed_by(
                tx, task_id, token
            )
            return done, self._claim(tx)

    def fail(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        token: int | None = None,
        error: object = None,
        retry: bool = True,
    ) -> str | None:
        """Fail a RESERVED task: AVAILABLE again, WAITING for a retry delay, or DEAD.

        None if the task is not RESERVED (or, with ``token``, not under that lease).
        ``error`` (a str or an exception) is recorded as the task's last error.
        With ``retry=False`` the task goes DEAD at once, its attempts all used
        (a failure no retry can mend).
        """
        task_id = check_task_id(task_id)
        token = None if token is None else check_token(token)
        text = check_error(error)
        retry = check_flag(retry, "retry")
        with self._call(now) as tx:
            return self._fail(tx, task_id, token, text, retry)

    def _fail(
        self, tx: Transaction, task_id: str, token: int | None, text: str | None, retry: bool
    ) -> str | None:
        task = tx.lease(self.queue, task_id, token)
        if task is None:
            return None
        if not retry and task.stop_requested_at is None:
            _kill(tx, task, text)
            return State.DEAD.value
        return self._end_lease(tx, task, tx.now, text)[0].value

    def claim(self, now: Number | None = None) -> Lease | None:
        """Like ``reserve``, but returns the whole lease: token, attempt, deadline, payload."""
        with self._call(now) as tx:
            return self._claim(tx)

    def extend(
        self,
        task_id: str,
        token: int,
        now: Number | None = None,
        *,
        seconds: Number | None = None,
    ) -> Number | None:
        """Heartbeat: the lease now ends at ``now + seconds`` (default lease_seconds).

        Returns the new deadline, or None if ``token`` is not the task's current
        lease (it ran out, ended, or another worker holds the task now).
        """
        beat = self.heartbeat(task_id, token, now, seconds=seconds)
        return None if beat is None else beat.deadline

    def heartbeat(
        self,
        task_id: str,
        token: int,
        now: Number | None = None,
        *,
        seconds: Number | None = None,
    ) -> Heartbeat | None:
        """``extend``, answering also whether the task was asked to stop (``cancel``):
        what a Worker's heartbeats call."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        length = self.lease_seconds if seconds is None else check_seconds(seconds, "seconds")
        with self._call(now, one_write=True) as tx:
            stop = tx.extend(self.queue, task_id, token, length)
            return None if stop is None else Heartbeat(time_after(tx.now, length), stop)

    def release(self, task_id: str, token: int, now: Number | None = None) -> bool:
        """Give a lease back without counting its attempt: the task goes to the back of the line."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        with self._call(now) as tx:
            task = tx.lease(self.queue, task_id, token)
            if task is None:
                return False
            state = released(task.stop_requested_at is not None)
            delta = -1 if state is State.AVAILABLE else 0  # an attempt given back is not counted
            tx.end_lease(task, state, tx.now, task.last_error, attempts_delta=delta)
            return True

    def claim_many(self, n: int, now: Number | None = None) -> list[Lease]:
        """Up to ``n`` leases from the front of the line, in one transaction."""
        n = check_count(n, "n")
        with self._call(now) as tx:
            return self._claim_many(tx, n)

    def _claim_many(self, tx: Transaction, n: int) -> list[Lease]:
        leases: list[Lease] = []
        while True:  # more than once only to replace tasks dead-lettered on the way
            wanted = n - len(leases)
            claimed = tx.claim_many(self.queue, wanted, self.lease_seconds, self.fair)
            deadline = time_after(tx.now, self.lease_seconds)  # (known once it claimed)
            leases.extend(filter(None, (self._lease(tx, c, deadline) for c in claimed)))
            if len(claimed) < wanted or len(leases) == n:
                return leases

    def complete_many(
        self,
        leases: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]],
        now: Number | None = None,
    ) -> list[bool]:
        """``complete(task_id, token=token)`` for each lease (or (id, token) pair, or
        (id, token, result) triple), in one transaction; the answers in the same
        order."""
        items = check_leases(leases, self.max_payload_bytes)
        with self._call(now) as tx:
            return self._complete_many(tx, items)

    def _complete_many(self, tx: Transaction, items: list[Completion]) -> list[bool]:
        if not items or tx.complete_many(self.queue, items) == len(items):
            return [True] * len(items)
        # Some were not completed now: each is done if its lease completed it, now
        # or in an earlier call (a retry); one item completes one row at most.
        return [self._completed_by(tx, task_id, token) for task_id, token, _ in items]

    def settle_and_claim(
        self,
        n: int,
        now: Number | None = None,
        *,
        completed: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]] = (),
        failed: Iterable[tuple[str, int, object] | tuple[str, int, object, bool]] = (),
    ) -> tuple[list[bool], list[str | None], list[Lease]]:
        """Report the outcomes of finished leases and claim up to ``n`` (0 to MAX_BATCH)
        new ones, in one transaction: one commit for a worker's every outcome and
        its next tasks.

        ``completed`` holds Leases, (task id, token) pairs or (task id, token,
        result) triples, each answered as ``complete(task_id, token=token,
        result=result)`` would (a retry answers True again);
        ``failed`` holds (task id, token, error) triples or (task id, token, error,
        retry) quadruples, each answered as ``fail`` would.  The completions happen
        first, then the failures, then the claim, which may thus take a task failed
        just before.  Returns both lists of answers, in the order given, and the new
        leases.
        """
        n = check_count(n, "n", least=0)
        done_items = check_leases(completed, self.max_payload_bytes, "completed")
        fail_items = check_failures(failed)
        with self._call(now) as tx:
            done = self._complete_many(tx, done_items)
            states = [self._fail(tx, *item) for item in fail_items]
            return done, states, self._claim_many(tx, n) if n else []

    def progress(
        self,
        task_id: str,
        token: int,
        value: Number | None = None,
        message: str | None = None,
        *,
        now: Number | None = None,
    ) -> bool:
        """Report the progress of a running task: a number (on a scale of the
        handler's own) and/or a message, shown by ``info``, ``sqlq show`` and
        ``sqlq list``.  False, and no change, if ``token`` is not the task's current
        lease (as ``extend``)."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        number, text = check_progress(value, message)
        with self._call(now, one_write=True) as tx:
            return tx.progress(self.queue, task_id, token, number, text)
