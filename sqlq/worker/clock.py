"""The time a Worker measures and waits with: :class:`Clock` (what it needs of one) and
:class:`SystemClock` (the real one; ``sqlq.testing.ManualClock`` in tests)."""

from __future__ import annotations

import threading
import time
from typing import Protocol

#: Longest wait of the thread that calls ``run`` before it looks for a stop request.
SIGNAL_CHECK = 0.1


class Clock(Protocol):
    """What a Worker measures time and waits with."""

    def monotonic(self) -> float:
        """Seconds from some start; never goes back."""
        ...

    def wait(self, cond: threading.Condition, until: float | None) -> None:
        """Wait on ``cond`` (held by the caller) until it is notified or ``monotonic()``
        reaches ``until`` (None: no time limit).  It may return sooner: callers
        check again what they wait for."""
        ...


class SystemClock:
    """The real clock: ``time.monotonic``, and waits that last at most SIGNAL_CHECK
    (a signal delivered to another thread runs its Python handler only once the
    main thread runs Python code again)."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wait(self, cond: threading.Condition, until: float | None) -> None:
        left = SIGNAL_CHECK if until is None else min(until - time.monotonic(), SIGNAL_CHECK)
        if left > 0:
            cond.wait(left)
