"""Queue's calls: each call is one write transaction of the backend at a checked
time, in which everything due happens first (the system clock checked against
the kernel's, a time far behind the queue's warned about)."""

from __future__ import annotations

import logging
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from ..backend import Transaction
from ..contract import Number, check_time
from ..errors import ClockSkew
from .engine import Engine

if TYPE_CHECKING:  # the backend loads SQLAlchemy when a Queue opens its database
    import sqlalchemy as sa


#: How far (seconds) a reading of the system clock may run ahead of the kernel's clock
#: (and how far readings advance between two checks against it).
DEFAULT_MAX_CLOCK_STEP = 60.0


#: At most one warning per this many seconds about a clock behind the queue's time.
LAG_WARNING_EVERY = 60.0


log = logging.getLogger("sqlq")


class Calls(Engine):
    """Opening a call's transaction: _call."""

    def _call(
        self, now: Number | None, conn: sa.Connection | None = None, one_write: bool = False
    ) -> AbstractContextManager[Transaction]:
        """One call: a transaction at ``now`` in which everything due has happened.
        ``one_write``: the call changes at most one thing, as its last statement, and
        raises nothing after it (see Backend.transaction): not the claims, which
        decode payloads after their write."""
        if now is not None:
            now, opened = check_time(now), self._opened
        elif self._server_time:  # the database's clock, one for every machine
            opened = self._opened
        elif self._guard_clock:
            now, opened = check_time(self._clock()), self._opened_at_reading
            if now > self._kernel_seen + self._step:
                self._check_clock(now)
        else:
            now, opened = check_time(self._clock()), self._opened
        return self._backend.transaction(now, self.queue, conn, opened, one_write)

    def _opened(self, tx: Transaction, asked: Number) -> None:
        """What a call's transaction runs once it has read the clock, if something fell
        due or the call's time ``asked`` (given as ``now``, or by a custom clock)
        was behind the queue's.  Warns if it was far behind: handled at the mark
        as the contract says, but most likely a number given by position where
        another argument was meant (``add(task_id, 5)`` sets now, not the payload)."""
        if asked < tx.mark - self._step:
            self._warn_behind(
                "%s: a call's time %r is %.1f s behind the queue's time and was handled at "
                "the queue's time; was the number meant as another argument? (add(task_id, 5) "
                "sets now, not the payload: pass payload=5)",
                asked,
                tx.mark - asked,
            )
        self._advance(tx, tx.events)

    def _opened_at_reading(self, tx: Transaction, asked: Number) -> None:
        """_opened for a call at a reading of the system clock: also warns if the
        reading is far behind the queue's time."""
        if asked < tx.mark - self._step:
            self._warn_behind(
                "%s: the queue's time is %.1f s ahead of this process's clock (a clock "
                "stepped back, or another process's clock runs ahead); calls use the "
                "queue's time",
                tx.mark - asked,
            )
        self._advance(tx, tx.events)

    def _check_clock(self, reading: Number) -> None:
        """Is this reading of the system clock more than max_clock_step ahead of the
        backend's reference clock (on SQLite, the kernel's)?  Asked whenever a
        reading passes the reference time at the last check plus the step (about
        once a minute with a sound clock), so no reading accepted is more than the
        step ahead of the reference time, whether the clock jumps or creeps."""
        step = self._step
        kernel = self._backend.clock_reference()
        if kernel is None:  # cannot tell: trust the clock for another step
            self._kernel_seen = reading
            return
        if reading - kernel > step:
            raise ClockSkew(
                f"{self._backend.name}: this process's clock is {reading - kernel:+.1f} s "
                f"off the operating system's (more than max_clock_step={step:g} s); "
                "the call was refused so that it cannot move the queue's time"
            )
        self._kernel_seen = kernel

    def _warn_behind(self, message: str, *args: object) -> None:
        """A call's time far behind the queue's (see _opened): one warning a
        LAG_WARNING_EVERY seconds at most; ``message`` is formatted with the
        database's name and ``args``."""
        seen = time.monotonic()
        if seen - self._lag_warned >= LAG_WARNING_EVERY:
            self._lag_warned = seen
            log.warning(message, self._backend.name, *args)
