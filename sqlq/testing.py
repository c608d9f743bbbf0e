"""Helpers for testing code that uses sqlq.

:class:`ManualClock` is a clock that moves only when the test moves it.  It
serves both clocks sqlq takes: ``Queue(..., clock=clock.time)`` (Unix time, for
leases) and ``Worker(..., clock=clock)`` (intervals and waits: heartbeats, time
limits, the grace period, idle back-off), so everything time-driven happens
exactly when the test says, without sleeps::

    clock = ManualClock()
    queue = sqlq.Queue(path, lease_seconds=30, max_attempts=3, clock=clock.time)
    worker = sqlq.Worker(queue, handler, clock=clock)
    ...                          # run the worker in a thread
    clock.wait_for_sleepers(2)   # its claim loop and heartbeat thread wait on the clock
    clock.advance(10)            # the heartbeat due at 10 s runs now
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

__all__ = ["ManualClock"]


class ManualClock:
    """A clock for tests: ``time()``, ``monotonic()`` and ``wait()`` move only with
    ``advance()``.  Thread-safe.

    A thread in ``wait()`` is a *sleeper* until it is notified or the clock
    reaches its deadline; ``wait_for_sleepers`` lets a test wait (in real time)
    until the threads it drives are all parked before it moves the clock.
    """

    def __init__(self, start: float = 1_000_000.0) -> None:
        self._start = float(start)
        self._now = 0.0
        self._state = threading.Condition(threading.RLock())
        self._sleepers: dict[int, tuple[threading.Condition, float | None]] = {}
        self._keys = itertools.count()

    def time(self) -> float:
        """Unix time: ``start`` plus the seconds advanced (for ``Queue(clock=...)``)."""
        return self._start + self._now

    def monotonic(self) -> float:
        """The seconds advanced so far."""
        return self._now

    def wait(self, cond: threading.Condition, until: float | None) -> None:
        """Wait on ``cond`` (held) until notified or until the clock reaches ``until``."""
        with self._state:
            if until is not None and self._now >= until:
                return
            key = next(self._keys)
            self._sleepers[key] = (cond, until)
            self._state.notify_all()
        try:
            cond.wait()
        finally:
            with self._state:
                self._sleepers.pop(key, None)
                self._state.notify_all()

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on; the waits due by then end."""
        if not seconds >= 0:
            raise ValueError(f"a clock only moves forward, not by {seconds!r}")
        self._move_to(self._now + seconds)

    def _move_to(self, now: float) -> None:
        with self._state:
            self._now = now = max(self._now, now)
            due = [k for k, (_, u) in self._sleepers.items() if u is not None and u <= now]
            woken: dict[int, threading.Condition] = {}
            for key in due:  # awake from now on, before they run again
                cond, _ = self._sleepers.pop(key)
                woken[id(cond)] = cond
        for cond in woken.values():
            with cond:
                cond.notify_all()

    def next_deadline(self) -> float | None:
        """The earliest deadline of the sleepers, or None if none has one."""
        with self._state:
            return self._next_deadline()

    def _next_deadline(self) -> float | None:
        return min((u for _, u in self._sleepers.values() if u is not None), default=None)

    def wait_for_sleepers(self, count: int, timeout: float = 10.0) -> None:
        """Wait, in real time, until at least ``count`` threads wait on this clock;
        TimeoutError after ``timeout`` seconds.  (A thread notified by its own
        program counts until it runs again.)"""
        self._wait_for(lambda: len(self._sleepers) >= count, timeout, f"{count} sleepers")

    def wait_for_deadline(self, at: float, timeout: float = 10.0) -> None:
        """Wait, in real time, until a thread waits on this clock with a deadline still
        ahead and at or before ``at`` (seconds advanced): a thread that arms a deadline
        when another one tells it to (a worker's monitor, for a task's time limit) has
        armed it."""
        self._wait_for(
            lambda: any(
                until is not None and self._now < until <= at
                for _, until in self._sleepers.values()
            ),
            timeout,
            f"a sleeper with a deadline by {at:g}",
        )

    def step(self, sleepers: int, timeout: float = 10.0) -> float:
        """Once ``sleepers`` threads wait on the clock, one of them with a deadline,
        move the clock to the earliest deadline (one event at a time, as a
        simulation would) and return it."""
        with self._state:  # reentrant: held across the wait and the look at the deadline
            self._wait_for(
                lambda: len(self._sleepers) >= sleepers and self._next_deadline() is not None,
                timeout,
                f"{sleepers} sleepers, one with a deadline",
            )
            deadline = self._next_deadline()
            assert deadline is not None
        self._move_to(deadline)
        return deadline

    def _wait_for(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        with self._state:
            while not ready():
                left = end - time.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"waited {timeout:g} s for {what}; {len(self._sleepers)} threads "
                        "wait on the clock"
                    )
                self._state.wait(left)
