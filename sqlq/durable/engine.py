"""Queue's engine: what a call's transaction decides about tasks (the due events in
their order, how a lease ends, a claim's lease), by the rules of sqlq/rules.py; the
backend only stores it (see sqlq.backend)."""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import payload as payloads
from ..backend import Backend, Claimed, Event, TaskRow, Transaction
from ..contract import (
    LEASE_EXPIRED,
    Number,
    State,
    check_max_attempts,
    check_retry,
    time_after,
    undecodable_error,
)
from ..errors import InvalidPayload
from ..records import Lease
from ..retry import Retry
from ..rules import lease_end, runs_before


class Fields:
    """What every part of Queue shares (declared here for the type checker;
    Queue.__init__ sets it)."""

    if TYPE_CHECKING:  # (annotations only: nothing at run time, nothing documented twice)
        queue: str
        lease_seconds: Number
        max_attempts: int
        retry: Retry
        aging: float
        fair: bool
        max_payload_bytes: int
        max_clock_step: float | None
        _explicit: tuple[Number | None, int | None, Retry | None]
        _step: float
        _guard_clock: bool
        _kernel_seen: float
        _lag_warned: float
        _clock: Callable[[], float]
        _rng: Any
        _backend: Backend
        _server_time: bool


class Engine(Fields):
    """Due events, lease ends and claims within one transaction."""

    def _advance(self, tx: Transaction, events: list[Event]) -> None:
        """Run due events in (time, counter) order.  An expired lease may start a
        retry delay that is itself already over: that wake-up joins the merge."""
        later: list[Event] = []
        i = 0
        while i < len(events) or later:
            if later and (i == len(events) or runs_before(later[0][:2], events[i][:2])):
                at, order, task = heapq.heappop(later)
            else:
                at, order, task = events[i]
                i += 1
            if task.state is State.WAITING:
                tx.wake(task, order, at)
                continue
            _, seq, run_at = self._end_lease(tx, task, at, LEASE_EXPIRED)
            if run_at is not None and run_at <= tx.now:
                heapq.heappush(later, (run_at, seq, task._replace(state=State.WAITING, seq=seq)))

    def _end_lease(
        self, tx: Transaction, task: TaskRow, at: Number, error: str | None
    ) -> tuple[State, int, Number | None]:
        """A failed or expired attempt at time ``at``: retry now, retry later, or DEAD;
        CANCELLED if the task was asked to stop.

        Returns the new state, the task's new seq, and when it wakes if WAITING.
        """
        state, run_at = lease_end(task.stop_requested_at is not None, task.attempts,
                                  task.max_attempts, task.retry, self._rng, at)  # fmt: skip
        return state, tx.end_lease(task, state, at, error, run_at), run_at

    def _policy(self, max_attempts: object, retry: object) -> tuple[int, Retry]:
        """The max_attempts and retry policy of a task added now: the queue's, or the
        call's own."""
        return (
            self.max_attempts if max_attempts is None else check_max_attempts(max_attempts),
            self.retry if retry is None else check_retry(retry),
        )

    def _claim(self, tx: Transaction) -> Lease | None:
        while (claimed := tx.claim(self.queue, self.lease_seconds, self.fair)) is not None:
            lease = self._lease(tx, claimed, time_after(tx.now, self.lease_seconds))
            if lease is not None:
                return lease
        return None

    def _lease(self, tx: Transaction, claimed: Claimed, deadline: Number) -> Lease | None:
        """The lease of a task just claimed; None if its payload cannot be decoded, in
        which case the task is dead-lettered (see contract.undecodable_error)."""
        task_id, token, attempt, encoded, name = claimed
        try:
            return Lease(task_id, token, attempt, deadline, payloads.decode(encoded), name)
        except InvalidPayload as exc:
            task = tx.get(self.queue, task_id)
            assert task is not None  # claimed in this transaction
            _kill(tx, task, undecodable_error(exc))
            return None


def _kill(tx: Transaction, task: TaskRow, error: str | None) -> None:
    """End a RESERVED task's lease with DEAD at once, all its attempts used."""
    delta = task.max_attempts - task.attempts
    tx.end_lease(task, State.DEAD, tx.now, error, attempts_delta=delta)


def _waiting(now: Number, run_at: Number) -> Number | None:
    """When a task added at ``now`` to first run at ``run_at`` wakes; None: at once."""
    return run_at if run_at > now else None
