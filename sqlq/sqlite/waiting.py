"""Waiting for the write lock, fairly and within one budget per call.

The thread lock, the turn at the write gate (gate.py) and the retries of a busy
write lock together last at most ``busy_timeout`` seconds from the start of the
call; past that the call raises :class:`sqlq.errors.Busy` naming the file.
``interrupt_waits`` ends waits sooner (a worker that stops).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ..errors import Busy
from . import driver
from .connections import Connections
from .gate import Gate
from .queries import Q

T = TypeVar("T")

#: Waiting for the write lock: the first pause and the longest, in seconds (randomised).
WAIT_MIN, WAIT_MAX = 100e-6, 5e-3


class Waiting(Connections):
    """The second layer of SqliteBackend: a call's waits, within one budget."""

    def _read(self, attempt: Callable[[Any], T]) -> T:
        """``attempt(conn)``, a read outside any transaction, holding the thread lock and
        retried while SQLite says busy, within one busy_timeout (see sqlstore)."""
        with self._holding_lock() as deadline, self._guard():
            conn = self._connection()
            return self._waiting(lambda: attempt(conn), deadline)

    def wait_for_lock(self, deadline: float) -> None:
        """Take this object's thread lock, the first wait of a call whose ``deadline``
        (time.monotonic(), busy_timeout after it began) is given; Busy if it stays
        taken until then (another thread's call waits for the write lock meanwhile).
        (A transaction, on the hot path, first tries ``_lock.acquire(False)``.)"""
        if not self._lock.acquire(True, max(0.0, deadline - time.monotonic())):
            raise self._busy("other calls on this queue object held it")

    @contextmanager
    def _holding_lock(self) -> Iterator[float]:
        """The thread lock for a call outside a transaction (a read, a checkpoint);
        gives the call's deadline."""
        deadline = time.monotonic() + self.busy_timeout
        self.wait_for_lock(deadline)
        try:
            yield deadline
        finally:
            self._lock.release()

    def _busy(self, why: str) -> Busy:
        if time.monotonic() >= self._cutoff:
            return Busy(
                f"{self.path}: the wait for the write lock was cut short by interrupt_waits "
                f"(a stopping worker's grace period is over): {why}"
            )
        return Busy(
            f"{self.path}: no turn at the write lock within busy_timeout "
            f"({self.busy_timeout:g} s): {why}"
        )

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls, those in progress included, ``after``
        seconds from now at the latest (then the call raises Busy); None: waits last
        busy_timeout again.  Thread-safe, and safe in a signal handler.  A call whose
        lock is free at once still goes through."""
        self._cutoff = math.inf if after is None else time.monotonic() + after
        gate = self._gate
        if gate is not None:
            gate.interrupt(self._cutoff)

    def begin_write(self, conn: Any, deadline: float) -> None:
        """Take a turn at the gate (see gate.py), then BEGIN IMMEDIATE.

        Both waits end by ``deadline`` (time.monotonic(); see wait_for_lock); past
        that, Busy.  The caller releases the gate (``end_write``) once the
        transaction is over.
        """
        if self._gate is None:
            self._gate = Gate(self.path + ".sqlq-gate", self.file_mode)
            self._gate.interrupt(self._cutoff)
        if not self._gate.acquire(deadline):
            raise self._busy("another process kept it")
        try:
            try:
                conn.execute(Q.begin_write)
            except driver.dbapi.OperationalError as exc:  # a writer outside the gate
                if not driver.is_busy(exc):
                    raise
                self._waiting(lambda: conn.execute(Q.begin_write), deadline, exc)
        except BaseException:
            self._gate.release()
            raise

    def end_write(self) -> None:
        if self._gate is not None:
            self._gate.release()

    def _waiting(
        self, attempt: Callable[[], T], deadline: float, error: BaseException | None = None
    ) -> T:
        """``attempt()``, retried with short randomised pauses while SQLite says busy
        (a writer that does not take the gate holds the lock), until ``deadline``
        (or an interrupt_waits cutoff).  ``error``: the busy error of a first
        attempt the caller already made."""
        pause = WAIT_MIN
        while True:
            if error is not None:  # busy: pause (randomised, growing), then try again
                now = time.monotonic()
                if now >= deadline:
                    raise error
                if now >= self._cutoff:
                    raise self._busy("a writer outside sqlq held SQLite's lock") from error
                time.sleep(pause * (0.5 + self._rng.random()))
                pause = min(pause * 2, WAIT_MAX)
            try:
                return attempt()
            except driver.dbapi.OperationalError as exc:
                if not driver.is_busy(exc):
                    raise
                error = exc
