"""How a Worker sizes its batches: how many leases a claim asks for (the prefetch, cut
by the handlers' mean duration) and when it is the claim loop's turn to report and claim."""

from __future__ import annotations

from .schedules import Schedules

#: Leases a worker holds at most, by default, when its handlers are quick: concurrency
#: plus a prefetch of ``max(BATCH - concurrency, concurrency)``, so that a deep queue
#: of short tasks is claimed and reported about BATCH a transaction.  64, not 32: at 8
#: processes a transaction's fixed cost (SQLite re-reads the pages other writers changed)
#: made 32 a transaction cost 1.11-1.17x the CPU per task of 64 (bench/RESULTS.md,
#: issue 24, 2026-12-08), with no more hoarding of long tasks.
BATCH = 64

#: Seconds a prefetched lease should wait at most for a handler: the prefetch is cut
#: to what the handlers get through in that time by their mean duration.
PREFETCH_HORIZON = 0.05

#: Weight of a handler's duration in the mean the prefetch is cut by.
DURATION_WEIGHT = 0.2

#: Seconds an outcome waits at most for the rest of its batch (a handler that takes
#: far longer than the others holds up no report).
REPORT_WAIT = PREFETCH_HORIZON


class Batches(Schedules):
    """The batch rules of the claim loop (see the sqlq.worker docstring)."""

    def _turn_due(self, waiting: int, now: float | None = None) -> bool:
        """Is it the claim loop's turn, with ``waiting`` jobs in the backlog (holding
        _cond)?  When the backlog is empty and there are outcomes to report or room
        to claim (an idle worker then waits for tasks), or when it runs low (fewer
        jobs than handlers) and there is room: the runners run what is left while
        the claim is in flight; or when an outcome has waited REPORT_WAIT (by ``now``,
        the worker's clock, if given)."""
        if waiting == 0:
            return bool(self._outcomes) or self._room(len(self._outcomes)) > 0
        if self._report_due(now):
            return True
        if waiting >= self.concurrency:
            return False
        return self._idle is None and self._room(len(self._outcomes)) > 0

    def _report_due(self, now: float | None = None) -> bool:
        """Has an outcome waited REPORT_WAIT for its batch, by ``now`` (holding _cond)?"""
        since = self._outcomes_since
        if since is None:
            return False
        return (self.clock.monotonic() if now is None else now) >= since + REPORT_WAIT

    def _next_wake(self) -> float | None:
        """When the waiting claim loop looks again at the latest (holding _cond): the
        next schedule due, or the time an outcome has waited long enough."""
        due = self._next_tick()
        since = self._outcomes_since
        if since is not None and (due is None or since + REPORT_WAIT < due):
            return since + REPORT_WAIT
        return due

    def _room(self, reporting: int) -> int:
        """How many leases a claim that reports ``reporting`` outcomes asks for (holding
        _cond): enough for every handler slot and the prefetch, less those held.
        The prefetch is what the handlers get through in PREFETCH_HORIZON by their
        mean duration so far (none before the first has returned), at most
        ``prefetch``: short tasks go up to BATCH a transaction, long ones are not hoarded.
        A slot whose handler runs past its time limit counts for neither (it may
        never be free again)."""
        free = self.concurrency - self._overdue
        if free <= 0:
            return 0
        mean = self._mean
        if mean is None:
            ahead = 0
        elif mean * self.prefetch <= free * PREFETCH_HORIZON:
            ahead = self.prefetch
        else:
            ahead = int(free * PREFETCH_HORIZON / mean)
        return max(0, free + ahead - (self._held - self._overdue - reporting))
