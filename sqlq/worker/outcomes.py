"""What a Worker does with its handlers' outcomes: each kept until the claim loop
reports it, then counted, logged and measured once its transaction has committed; a task
past its time limit failed; a lease given back."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from .. import payload as payloads
from ..contract import (
    State,
    check_result,
    describe_error,
)
from ..errors import TRANSIENT, InvalidArgument, NotRetryable
from ..events import event, task_fields
from ..records import Lease
from .batches import DURATION_WEIGHT
from .jobs import Phase, Running
from .state import _Busy
from .wakeups import Wakeups


class Outcomes(Wakeups):
    """Outcomes, their counts and logs (see the sqlq.worker docstring)."""

    def _finished(self, entry: Running, error: BaseException | None) -> None:
        """The handler returned or raised: its outcome waits for the claim loop to
        report it (its slot stays reserved until then).  A coroutine that ends
        with the CancelledError of the worker's cancel is reported no more."""
        lease = entry.lease
        entry.ended = ended = self.clock.monotonic()
        if error is None and entry.result is not None:
            entry.result, error = self._stored_result(entry.result)
        # (type(), never isinstance: a handler's exception may have a __class__ that raises)
        cancelled = entry.cancelled and issubclass(type(error), asyncio.CancelledError)
        with self._cond:
            self._active -= 1
            if entry.overdue:
                entry.overdue = False
                self._overdue -= 1
            mean = self._mean
            took = ended - entry.started
            self._mean = took if mean is None else mean + (took - mean) * DURATION_WEIGHT
            if self._returned or entry.state is Phase.RELEASED or cancelled:
                del self._running[lease.token]
                self._held -= 1
                self._cond.notify_all()
                given_up, first = True, False
            else:
                late = entry.state is Phase.TIMED_OUT
                entry.state = Phase.REPORTING
                first = not self._outcomes
                if first:
                    self._outcomes_since = ended
                self._outcomes.append((entry, error, late))
                given_up = False
            if first or self._turn_due(len(self._backlog), ended):
                # The claim loop: outcomes to report (the first of a batch, by
                # REPORT_WAIT at the latest), or room to claim.
                self._cond.notify_all()
            if threading.get_ident() not in self._runners:
                self._work.notify()  # the event loop's: a runner may wait for the slot
        if cancelled:
            self.log.debug("task %r: its handler was cancelled", lease.task_id)
        elif given_up:
            self.log.warning(
                "handler of task %r returned after the worker gave the task up; "
                "its result is ignored",
                lease.task_id,
            )

    def _stored_result(self, result: object) -> tuple[object, NotRetryable | None]:
        """A handler's return value as its report stores it: (the plain JSON value, read
        back from its encoding, None), or (None, why it cannot be stored).  Encoded
        here, once, so that one bad value never fails a whole report, not even one
        whose encoding raises (anything) or changes from call to call: its task then
        goes DEAD with that error, as retrying would return the same."""
        try:
            stored = check_result(result, self.queue.max_payload_bytes)
            return (None if stored is None else payloads.decode(stored)), None
        except InvalidArgument as exc:
            return None, NotRetryable(describe_error(exc))
        except BaseException as exc:
            return None, NotRetryable(f"the result cannot be stored: {describe_error(exc)}")

    def _acknowledge(
        self, entry: Running, error: BaseException | None, late: bool, answer: bool | str | None
    ) -> None:
        """Count and log an outcome the queue has answered (holding _cond)."""
        if self.metrics is not None:
            ran = 0.0 if entry.ended is None else entry.ended - entry.started
            self.metrics.handled(entry.lease.name, _outcome(error, late, answer), ran)
        if answer and error is None:
            self._stats.completed += 1
            if self.log.isEnabledFor(logging.DEBUG):  # a line per task: built only if shown
                fields = self._fields(entry, error)
                event(self.log, logging.DEBUG, "task completed", fields, outcome="COMPLETED")
        elif answer == State.CANCELLED:
            self._stats.cancelled += 1
            fields = self._fields(entry, error)
            event(self.log, logging.INFO, "task cancelled", fields, outcome=answer)
        elif answer:
            self._stats.failed += 1
            self._failed(self._fields(entry, error), str(answer), error)
        elif late:
            fields = self._fields(entry, error)
            event(self.log, logging.WARNING, "task result refused", fields, why="time limit")
        else:
            self._stats.lost += 1
            what = "completion" if error is None else "failure"
            fields = self._fields(entry, error)
            event(self.log, logging.WARNING, "task lost", fields, outcome="lost", refused=what)

    @staticmethod
    def _fields(entry: Running, error: BaseException | None) -> dict[str, Any]:
        """The fields of a task's outcome: the task's, how long its handler ran, its error."""
        fields = task_fields(entry.lease)
        if entry.ended is not None:
            fields["duration"] = entry.ended - entry.started
        if error is not None:
            fields["error"] = describe_error(error)
        return fields

    def _failed(
        self, fields: dict[str, Any], state: str, error: BaseException | None = None
    ) -> None:
        """Log a failure the queue accepted (holding _cond): WARNING, as the handler's
        failure is not the worker's; "task dead" once it used its last attempt."""
        dead = state == "DEAD"
        self._stats.dead += dead
        traceback = error if error is not None and self.log.isEnabledFor(logging.DEBUG) else None
        what = "task dead" if dead else "task failed"
        event(self.log, logging.WARNING, what, fields, outcome=state, exc_info=traceback)

    def _count(self, what: str) -> None:
        with self._cond:
            setattr(self._stats, what, getattr(self._stats, what) + 1)

    def _done_with(self, lease: Lease, outcome: str, error: BaseException | None = None) -> None:
        """The worker is done with ``lease``: ``outcome`` (sqlq.worker.metrics's) is
        stored, or given up; counted, and its span ended."""
        if self.metrics is not None:
            self.metrics.counted(lease.name, outcome)
        if self.tracer is not None:
            self.tracer.end(lease, outcome, error)

    def _time_out(self, entry: Running) -> None:
        lease = entry.lease
        error = f"time limit of {self.time_limit:g}s exceeded"
        state = self._persist(self.queue.fail, lease.task_id, token=lease.token, error=error)
        self._executor.cancel(entry)  # once failed: its CancelledError is not the error
        if isinstance(state, _Busy):
            return
        # A thread's handler runs on until it returns (its result will be refused);
        # a coroutine was cancelled.
        fields = {**task_fields(lease), "time_limit": self.time_limit, "error": error}
        self._done_with(lease, _final(state))
        with self._cond:
            if state is None:
                self._stats.lost += 1
                event(self.log, logging.WARNING, "task lost", fields, outcome="lost")
            else:
                self._stats.timed_out += 1
                self._failed(fields, state)

    def _cancelled(self, lease: Lease) -> bool:
        """Did the release of ``lease`` end its task CANCELLED (a stop was asked of it,
        which this worker may not have learnt yet)?  One read, at a release only (a stop,
        a backlog given back); a read that fails counts it as released."""
        try:
            return self.queue.status(lease.task_id) == State.CANCELLED
        except Exception:
            return False

    def _give_back(self, lease: Lease, why: str, level: int = logging.WARNING) -> None:
        """Release ``lease`` (its attempt is not counted).  One that cannot be released
        runs out at its deadline, and its task is retried then."""
        try:
            done = self.queue.release(lease.task_id, lease.token)
        except Exception as exc:
            self.log.log(
                logging.WARNING if isinstance(exc, TRANSIENT) else logging.ERROR,
                "task %r %s but could not be released (%s: %s); its lease runs out in at "
                "most %gs and the task is retried then",
                lease.task_id,
                why,
                type(exc).__name__,
                exc,
                self.queue.lease_seconds,
                exc_info=not isinstance(exc, TRANSIENT),
            )
            return
        outcome = "lost" if not done else "cancelled" if self._cancelled(lease) else "released"
        self._done_with(lease, outcome)
        self._count(outcome)
        fields = task_fields(lease)
        if outcome == "cancelled":  # a stop was asked of it: the release ended it
            event(self.log, logging.INFO, "task cancelled", fields, outcome=outcome, reason=why)
        elif outcome == "released":  # back in line, its attempt not counted
            event(self.log, level, "task released", fields, reason=why)
        else:
            event(self.log, logging.WARNING, "task lost", fields, outcome="lost", refused="release")


def _outcome(error: BaseException | None, late: bool, answer: bool | str | None) -> str:
    """An outcome as WorkerMetrics counts it (the cases of Worker._acknowledge)."""
    if answer:
        return (
            "completed" if error is None else "cancelled" if answer == State.CANCELLED else "failed"
        )
    return "late" if late else "lost"


def _final(answer: bool | str | None) -> str:
    """The outcome a task's report ends with (sqlq_worker_tasks_total's), from the queue's
    answer to it: True (completed), the failed task's state now, or None (refused)."""
    if answer is True:
        return "completed"
    if answer is None or answer is False:
        return "lost"
    return {"DEAD": "dead", "CANCELLED": "cancelled"}.get(answer, "retried")
