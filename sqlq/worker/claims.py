"""A Worker's claim loop and its group commit: one transaction reports every outcome
pending and claims for the room there is; the runner threads take the leases from the
backlog one after the other."""

from __future__ import annotations

import logging
import threading

from ..contract import (
    MAX_BATCH,
)
from ..errors import TRANSIENT
from ..events import event, task_fields
from ..records import Lease
from ..tasks import failure
from .jobs import Phase, Running
from .outcomes import _final
from .shutdown import Shutdown
from .state import _BUSY, BUSY_PAUSE, _Busy


class Claims(Shutdown):
    """The claim loop and the runner threads (see the sqlq.worker docstring)."""

    def _claim_loop(self) -> bool:
        """Claim and report until stopped (False) or idle as run() was asked (True).

        It sleeps while the runners have enough to do, and is woken when their
        backlog runs low with outcomes to report or room to claim (see _turn_due):
        once a batch, not once a task."""
        while True:
            if self._ticks and self._tick_schedules():
                self._idle = None  # claim the tasks just added at once
            with self._cond:
                while (
                    not self._stopping
                    and not self._turn_due(len(self._backlog))
                    and not self._tick_due()
                ):
                    self._wait(self._next_wake())
                if self._stopping:
                    return False  # _drain reports what is left
                reporting = bool(self._outcomes)
                idle = self._idle
            if idle is not None and not reporting:
                woken = self._pause(self._until_tick(self._until_due(idle)), self._woken)
                if woken and not self._take_announcement():
                    continue  # stopping, or outcomes to report
                if not woken:
                    self._idle = min(idle * 2, self.poll_max)
                if not woken and not self._ready():
                    if self._in_flight() == 0 and self._idle_end():
                        return True
                    continue
            short = self._settle(claim=True)
            if isinstance(short, _Busy):
                self._wait_for_stop(BUSY_PAUSE)
                continue
            if not short:
                self._idle = None
            elif (
                self._until is not None
                and self._in_flight() == 0
                and not self._ready()
                and self._idle_end()
            ):
                return True
            elif self._idle is None:
                self._idle = self.poll_min

    def _settle(self, *, claim: bool) -> bool | _Busy:
        """One transaction: report every outcome pending and, with ``claim``, take
        leases for the room there is (see _room; the outcomes reported free theirs
        in the same transaction, before the claim).  True if the claim found fewer
        tasks than it asked for; _BUSY (logged) if the call met a transient error,
        and then the outcomes wait for the next call.

        Outcomes that arrive while the call is in flight wait for the next one,
        so the tasks per commit grow with the load and are one when idle."""
        with self._cond:
            batch = self._outcomes[:MAX_BATCH]
            del self._outcomes[: len(batch)]
            since, self._outcomes_since = self._outcomes_since, None
            if self._outcomes:
                self._outcomes_since = self.clock.monotonic()
            wanted = min(self._room(len(batch)), MAX_BATCH) if claim else 0
            self._held += wanted  # reserved: the one rule that bounds the leases held
        completed = [(e.lease.task_id, e.lease.token, e.result) for e, x, _ in batch if x is None]
        failed = [
            (e.lease.task_id, e.lease.token, *failure(x)) for e, x, _ in batch if x is not None
        ]
        began = self.clock.monotonic()  # (before the leases' time began: see _take)
        try:
            done, states, leases = self.queue.settle_and_claim(
                wanted, completed=completed, failed=failed
            )
        except BaseException as exc:
            with self._cond:  # nothing changed: the outcomes go with the next call
                self._outcomes[:0] = batch
                self._outcomes_since = since
                self._held -= wanted
                self._cond.notify_all()
            if not isinstance(exc, TRANSIENT):
                raise
            self._log_busy(exc)
            return _BUSY
        if self.metrics is not None:
            self.metrics.transaction(self.clock.monotonic() - began)
        answers = iter(done), iter(states)
        answered = [(*outcome, next(answers[outcome[1] is not None])) for outcome in batch]
        with self._cond:
            self._stats.commits += 1
            for entry, error, late, answer in answered:
                self._acknowledge(entry, error, late, answer)
                del self._running[entry.lease.token]
            self._held -= len(batch) + wanted - len(leases)
            self._cond.notify_all()
        if self.metrics is not None or self.tracer is not None:
            for entry, error, late, answer in answered:  # (not holding _cond: spans export)
                if not late:  # (a late one was counted when the time limit failed its task)
                    self._done_with(entry.lease, _final(answer), error)
        if leases:
            self._take(leases, began)
        return len(leases) < wanted

    def _take(self, leases: list[Lease], asked: float) -> None:
        """Leases just obtained, for room reserved for them: into the backlog, where the
        runners take them, heartbeated until they run; or, if the worker is stopping,
        released at once.  Their first heartbeat is due a heartbeat after ``asked``, when
        the call that claimed them began (the worker's clock), not after it returned: a
        lease runs from its transaction's time, and a call that returns late (a slow
        commit, a loaded machine) must not eat into the lease's margin."""
        now = self.clock.monotonic()
        beat = asked + self.heartbeat
        with self._cond:
            self._stats.claimed += len(leases)
            stopping = self._stopping
            if not stopping:
                running, backlog = self._running, self._backlog
                for lease in leases:
                    entry = Running(lease, started=now, next_beat=beat, state=Phase.QUEUED)
                    entry.queue = self.queue  # (current_task's)
                    running[lease.token] = entry
                    backlog.append(entry)
                self._monitor.scheduled(entry)  # (all have the same first heartbeat)
                self._monitor.bound_backlog()
                self._work.notify(len(leases))
        if stopping:
            self._let_releases_wait()
            for lease in leases:
                self._give_back(lease, "was claimed as the worker stopped")
            with self._cond:
                self._held -= len(leases)
                self._cond.notify_all()
            return
        if self.log.isEnabledFor(logging.DEBUG):
            for lease in leases:
                event(self.log, logging.DEBUG, "task claimed", task_fields(lease))

    def _runner(self) -> None:
        """A runner thread: runs the handlers of the leases claimed, taking them from
        the backlog one after the other, with no hand-off to another thread per task."""
        self._runners.add(threading.get_ident())
        while True:
            with self._cond:
                entry = self._next_job()
            if entry is None:
                return
            if entry.state is Phase.RELEASED:  # asked to stop before it started: not run
                self._hand_back([entry], "was asked to stop before its handler started")
                continue
            try:
                if self.tracer is not None:
                    self.tracer.start(entry.lease)
                self._executor.run(entry)
            except BaseException:  # (the executor reports a handler's own errors)
                self.log.error("worker error in a runner thread", exc_info=True)

    def _next_job(self) -> Running | None:
        """The next job of the backlog for a runner (holding _cond), once a slot is free;
        None once the worker stops (the leases not started are given back).  One whose
        task was asked to stop (a heartbeat learnt it) comes RELEASED, to be given
        back (which ends it CANCELLED) instead of run."""
        backlog = self._backlog
        while True:
            if self._stopping or self._returned:
                return None
            while backlog and self._active < self.concurrency:
                entry = backlog.popleft()
                if entry.lost:  # its lease was lost while it waited: not run
                    entry.state = Phase.RELEASED
                    del self._running[entry.lease.token]
                    self._held -= 1
                    self._stats.lost += 1
                    self._done_with(entry.lease, "lost")
                    fields = task_fields(entry.lease)
                    event(self.log, logging.WARNING, "task lost", fields, outcome="lost")
                    continue
                if entry.stop_requested:
                    entry.state = Phase.RELEASED
                    return entry
                self._active += 1
                entry.state = Phase.RUNNING
                entry.started = self.clock.monotonic()
                if self.time_limit is not None:
                    self._monitor.scheduled(entry)
                self._monitor.bound_backlog()
                return entry
            if self._turn_due(0):
                self._cond.notify_all()  # the claim loop (the backlog just ran low)
            self._work.wait()
