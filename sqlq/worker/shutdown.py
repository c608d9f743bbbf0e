"""How a Worker stops: the leases prefetched given back at once, the handlers' grace
period (their outcomes still reported), then the rest released."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .jobs import ACTIVE, Phase, Running
from .outcomes import Outcomes
from .state import BUSY_PAUSE, _Busy

#: Seconds the releases and reports still pending when the grace period ends may
#: wait for the write lock (another worker's turn, say); then they give up.
RELEASE_WAIT = 1.0


class Shutdown(Outcomes):
    """The grace period and the give-backs (see the sqlq.worker docstring)."""

    if TYPE_CHECKING:  # (the claim loop's transaction: sqlq.worker.claims)

        def _settle(self, *, claim: bool) -> bool | _Busy: ...

    def _hurry_up(self) -> None:
        """Skip what is left of the grace period (its waits for locks too)."""
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
        self.queue.interrupt_waits(0)

    def _drain(self) -> None:
        """Give back the leases prefetched, report what handlers return within the
        grace period, then release the rest."""
        with self._cond:
            start = self._stop_at if self._stop_at is not None else self.clock.monotonic()
            queued = bool(self._backlog)
        if queued:
            self._let_releases_wait()
            self._shed("was prefetched and had not started when the worker stopped")

        def settled() -> bool:
            return self._hurry or not any(e.state in ACTIVE for e in self._running.values())

        self._report_until(start + self.grace, settled)
        with self._cond:
            pending = any(e.state in ACTIVE for e in self._running.values())
            give_back = [e.lease for e in self._running.values() if e.state is Phase.RUNNING]
            given_up = [
                e for e in self._running.values() if e.state in (Phase.RUNNING, Phase.TIMED_OUT)
            ]
            for entry in given_up:
                entry.state = Phase.RELEASED
        for entry in given_up:
            self._executor.cancel(entry)
        # The grace is over: releases and the reports still pending (their Busy
        # retries) get RELEASE_WAIT of their own, then they give up.
        last = self.clock.monotonic() + RELEASE_WAIT
        if pending:
            self._let_releases_wait()
        for lease in give_back:
            self._give_back(lease, "was still running after the grace period")
        self._report_until(last, lambda: not self._outcomes)
        with self._cond:
            self._returned = True
            self._cond.notify_all()
            self._monitor.end()
            self._abandon("could not be reported before the worker stopped")

    def _shed(self, why: str, level: int = logging.INFO) -> None:
        """Give back every lease waiting in the backlog (released: the attempt is not
        counted) at a stop; the monitor does the same in two steps (_take_backlog under
        the lock that finds it due, _hand_back after) once the oldest waited BACKLOG_WAIT
        (sqlq.worker.monitor) or a handler ran past its time limit.  The prefetch is then
        cut as if handlers took as long as the oldest waited (the mean was no guide)."""
        with self._cond:
            queued = self._take_backlog()
        if queued:
            self._hand_back(queued, why, level)

    def _take_backlog(self) -> list[Running]:
        """Take every lease waiting in the backlog, RELEASED, for _hand_back (holding
        _cond), and cut the prefetch as _shed says."""
        queued = list(self._backlog)
        self._backlog.clear()
        if queued:
            waited = self.clock.monotonic() - queued[0].started
            mean = self._mean
            self._mean = waited if mean is None else max(mean, waited)
            for entry in queued:
                entry.state = Phase.RELEASED
        return queued

    def _hand_back(self, entries: list[Running], why: str, level: int = logging.INFO) -> None:
        """Release the leases of ``entries``, taken from the backlog and RELEASED (not
        run, not heartbeated), and stop counting them as held."""
        for entry in entries:
            self._give_back(entry.lease, why, level)
        with self._cond:
            for entry in entries:
                del self._running[entry.lease.token]
            self._held -= len(entries)
            self._cond.notify_all()

    def _report_until(self, end: float, done: Callable[[], bool]) -> None:
        """Report outcomes as they come, claiming nothing, until ``done()`` (asked
        holding _cond) or the clock reaches ``end``."""
        while True:
            with self._cond:
                while not (done() or self._outcomes) and self.clock.monotonic() < end:
                    self._wait(end)
                if done() or self.clock.monotonic() >= end:
                    return
            try:
                if isinstance(self._settle(claim=False), _Busy):
                    self._pause(BUSY_PAUSE, done)
            except Exception:
                self.log.error("worker error while reporting outcomes", exc_info=True)
                with self._cond:
                    self._abandon("could not be reported")

    def _abandon(self, why: str) -> None:
        """Give up the outcomes not reported (holding _cond): their leases run out."""
        for entry, error, _ in self._outcomes:
            entry.state = Phase.RELEASED
            self._done_with(entry.lease, "abandoned", error)
            self.log.warning(
                "task %r: the outcome of its handler %s; its lease runs out in at most %gs "
                "and the task is retried then",
                entry.lease.task_id,
                why,
                self.queue.lease_seconds,
            )
        self._outcomes.clear()

    def _let_releases_wait(self) -> None:
        """Let waits go on until the grace ends, or for RELEASE_WAIT if that is later:
        a release while stopping gets RELEASE_WAIT, as the drain's do, even once
        the grace (which ends every wait) is over."""
        with self._cond:
            assert self._stop_at is not None
            left = 0.0 if self._hurry else self._stop_at + self.grace - self.clock.monotonic()
        self.queue.interrupt_waits(max(left, RELEASE_WAIT))
