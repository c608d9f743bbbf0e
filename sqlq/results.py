"""Waiting for a task's result: the polling that Queue, WorkQueue and AsyncQueue share.

``wait_for_result(task_id, timeout)`` looks at the task (its state, result and
last error, in one call of the queue), and until it is COMPLETED (the answer is
its result) or DEAD (TaskDead, with its last error) waits and looks again:
first after FIRST_POLL seconds, then after pauses that double up to ``poll``.
When ``timeout`` seconds of ``clock`` have passed, the last look decides:
ResultTimeout if the task is neither.  An unknown id is waited for like a task
that is not done (another process may add it yet).  The waits are ``sleep``'s
(``asyncio.sleep`` for AsyncQueue), so tests drive them with a clock and a sleep
of their own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from .contract import Number, Outcome, State, check_seconds, check_task_id, result_of
from .errors import InvalidArgument, ResultTimeout

#: The first pause between two looks, in seconds (or ``poll`` if that is shorter).
FIRST_POLL: Final = 0.01
#: The longest pause between two looks by default, in seconds.
DEFAULT_POLL: Final = 0.5

#: A look at a task, or None for an unknown id.
Found = Outcome | None


class ResultWait:
    """One wait for a task's result: after each look, the answer, or how long to
    pause before the next look."""

    def __init__(
        self, task_id: object, timeout: object, poll: object, clock: Callable[[], float]
    ) -> None:
        self.task_id = check_task_id(task_id)
        seconds = check_seconds(timeout, "timeout")
        self._longest = check_seconds(poll, "poll")
        if not self._longest > 0:
            raise InvalidArgument("poll must be more than 0 seconds")
        if not callable(clock):
            raise InvalidArgument(f"clock must be a function giving the time, not {clock!r}")
        self._pause: Number = min(FIRST_POLL, self._longest)
        self._clock = clock
        self._end = clock() + seconds
        self.value: Any = None

    def pause(self, found: Found) -> Number | None:
        """None once the task is COMPLETED (``value`` is its result); TaskDead if it is
        DEAD; ResultTimeout once the time is up; else the seconds to wait."""
        if found is not None and found[0] in (State.COMPLETED, State.DEAD):
            self.value = result_of(self.task_id, found)
            return None
        left = self._end - self._clock()
        if left <= 0:
            state = None if found is None else found[0]
            raise ResultTimeout(
                f"task {self.task_id!r} was {state or 'unknown'} when the wait for its "
                "result timed out",
                self.task_id,
                state,
            )
        pause = min(self._pause, left)
        self._pause = min(2 * self._pause, self._longest)
        return pause


def wait(waiting: ResultWait, look: Callable[[str], Found], sleep: Callable[[float], Any]) -> Any:
    """Run ``waiting`` with ``look`` (a face's) and ``sleep``; the task's result."""
    while (pause := waiting.pause(look(waiting.task_id))) is not None:
        sleep(pause)
    return waiting.value


class ResultWaiting:
    """``wait_for_result``, the one call Queue and WorkQueue write alike: each face's
    Inspection part inherits it and gives ``_outcome``, its look at a task."""

    __slots__ = ()

    def _outcome(self, task_id: str) -> Found:
        raise NotImplementedError

    def wait_for_result(
        self,
        task_id: str,
        timeout: Number,
        *,
        poll: Number = DEFAULT_POLL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> Any:
        """Block until the task is COMPLETED (its result) or DEAD (TaskDead), or
        ``timeout`` seconds of ``clock`` have passed (ResultTimeout); looks with pauses
        that double up to ``poll`` seconds (see sqlq.results).  A WorkQueue looks at the
        latest time a call gave: only calls of other threads change its answer."""
        return wait(ResultWait(task_id, timeout, poll, clock), self._outcome, sleep)
