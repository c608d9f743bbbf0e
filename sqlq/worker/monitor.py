"""The worker's monitor: heartbeats (of the leases running and of those prefetched),
time limits, the summary line and the worker's row of the worker registry
(sqlq.registry), in one thread.

A :class:`Monitor` belongs to one :class:`sqlq.Worker` and shares its lock, but
waits on a condition of its own: it is woken only when a task arrives whose
heartbeat or time limit is due before the monitor's next planned wake-up, or
when the worker stops, never by the claim loop's and the handlers' own
hand-offs (a drain of tiny tasks woke it three times per task when the two
shared one condition).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from ..contract import State
from ..errors import TRANSIENT, Busy, SchemaChanged
from ..events import event, task_fields
from .clock import Clock
from .jobs import BEATING, HELD, Phase, Running

if TYPE_CHECKING:
    from ..durable import Queue
    from .stats import WorkerStats

#: Seconds a prefetched lease waits in the backlog at most: once the oldest has waited
#: longer (a handler took far longer than the tasks before it, or hangs), the monitor
#: gives the whole backlog back to the queue (released, the attempt not counted) for
#: other workers to run, and the worker cuts its prefetch as if handlers took that
#: long.  Five times sqlq.worker's PREFETCH_HORIZON: a backlog of quick tasks is run
#: far sooner, even on a loaded machine.
BACKLOG_WAIT = 0.25

#: Seconds before a heartbeat that met Busy (or another error) is tried again.
RETRY_BEAT = 0.2
#: A handler still running this many times its time limit after it started (its task
#: failed at the limit) is logged once: it holds a slot it cannot be made to give back.
STUCK_AFTER = 2


class Watched(Protocol):
    """What the monitor reads and calls of its worker (a sqlq.Worker), under the lock
    it is given with it."""

    clock: Clock
    queue: Queue
    log: logging.Logger
    heartbeat: float
    time_limit: float | None
    summary_every: float | None
    concurrency: int
    worker_id: str
    _running: dict[int, Running]
    _backlog: deque[Running]
    _active: int
    _overdue: int
    _stats: WorkerStats

    def halt(self, error: SchemaChanged) -> None: ...

    def _time_out(self, entry: Running) -> None: ...

    def _take_backlog(self) -> list[Running]: ...

    def _hand_back(self, entries: list[Running], why: str, level: int = logging.INFO) -> None: ...

    def _log_busy(self, exc: Exception) -> None: ...


class Monitor:
    """Extends the lease of every running task every ``worker.heartbeat`` seconds,
    fails those past ``worker.time_limit``, logs the summary every
    ``worker.summary_every`` seconds, and writes the worker's row of the registry
    (what it holds) when it starts and every ``worker.heartbeat`` seconds (all of the
    worker's clock)."""

    def __init__(self, worker: Watched, lock: threading.RLock) -> None:
        self.worker = worker
        self._cond = threading.Condition(lock)  # the worker's: guards what it reads of it
        self._exit = False
        self._wake_at = math.inf  # when the monitor means to wake next (inf: when told)
        self._summary_at: float | None = None  # when the next summary is due
        self._summarized: tuple[float, WorkerStats] | None = None  # the last one: time, counts
        self._register_at = math.inf  # when the worker's row is written next
        self._thread: threading.Thread | None = None

    def start(self, now: float, stats: WorkerStats) -> None:
        w = self.worker
        with self._cond:
            self._summarized = (now, stats)
            self._register_at = now  # at once
            if w.summary_every:
                self._summary_at = now + w.summary_every
        self._thread = threading.Thread(
            target=self._loop, name=f"sqlq-worker-{w.queue.queue}-monitor", daemon=True
        )
        self._thread.start()

    def end(self) -> None:
        """No more rounds (the caller holds the worker's lock): the thread exits."""
        self._exit = True
        self._cond.notify()

    def join(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._thread.join()

    def scheduled(self, entry: Running) -> None:
        """A task began to run (the caller holds the worker's lock): wake the monitor
        if its first heartbeat or time limit comes before the planned wake-up."""
        limit = self.worker.time_limit
        due = entry.next_beat if limit is None else min(entry.next_beat, entry.started + limit)
        self.wake_by(due)

    def backlog_due(self) -> float:
        """When the worker's backlog has waited long enough (holding the worker's lock):
        its oldest lease's time plus BACKLOG_WAIT while some lease waits for a busy
        slot; else never."""
        w = self.worker
        if len(w._backlog) > w.concurrency - w._active:
            return w._backlog[0].started + BACKLOG_WAIT
        return math.inf

    def bound_backlog(self) -> None:
        """Wake by the time the backlog has waited long enough (holding the worker's
        lock): the worker calls it as leases join the backlog and as handlers start."""
        self.wake_by(self.backlog_due())

    def wake_by(self, due: float) -> None:
        """Wake the monitor by ``due`` (the worker's clock; the caller holds the worker's
        lock): a heartbeat or time limit, or a backlog whose wait is bounded."""
        if due < self._wake_at:
            self._wake_at = due
            self._cond.notify()

    def _loop(self) -> None:
        w = self.worker
        while True:
            try:
                if not self._round():
                    return
            except BaseException:
                w.log.error("worker error in the heartbeat thread", exc_info=True)
                with self._cond:
                    if self._exit:
                        return
                    w.clock.wait(self._cond, w.clock.monotonic() + RETRY_BEAT)

    def _round(self) -> bool:
        """Wait for the next heartbeat, time limit or summary due, then do it; False
        to exit."""
        w = self.worker
        with self._cond:
            if self._exit:
                return False
            now = w.clock.monotonic()
            beats, limits, stuck = [], [], []
            soonest = math.inf if self._summary_at is None else self._summary_at
            summary = now >= soonest
            register = now >= self._register_at
            soonest = min(soonest, self._register_at)
            shed_at = self.backlog_due()  # some lease waits for a slot: bounded
            shed = now >= shed_at
            soonest = min(soonest, shed_at)
            for entry in w._running.values():
                if entry.state is Phase.TIMED_OUT and not entry.stuck:
                    # Failed at its time limit, its handler still holds the slot (a thread
                    # cannot be stopped; a coroutine may swallow its cancellation): say so
                    # once, at twice the limit.
                    assert w.time_limit is not None
                    at = entry.started + STUCK_AFTER * w.time_limit
                    if now >= at:
                        entry.stuck = True
                        stuck.append(entry)
                    else:
                        soonest = min(soonest, at)
                    continue
                if entry.state not in BEATING or entry.lost:
                    continue
                if w.time_limit is not None and entry.state is Phase.RUNNING:
                    if now >= entry.started + w.time_limit:
                        entry.state = Phase.TIMED_OUT
                        entry.overdue = True
                        w._overdue += 1
                        limits.append(entry)
                        continue
                    soonest = min(soonest, entry.started + w.time_limit)
                if now >= entry.next_beat:
                    beats.append(entry)
                else:
                    soonest = min(soonest, entry.next_beat)
            if not (beats or limits or stuck or summary or register or shed):
                self._wake_at = soonest
                w.clock.wait(self._cond, None if soonest == math.inf else soonest)
                self._wake_at = -math.inf  # awake: it looks at every task anyway
                return True
            # The leases waiting now, under the lock that found the limit or the wait:
            # once the time limit cancels a coroutine its slot is free, and a lease
            # claimed for it (the failed task's retry, say) must run, not go back.
            queued = w._take_backlog() if limits or shed else []
        for entry in limits:
            w._time_out(entry)
        if queued and limits:  # that slot may never be free again: its waiters go back
            w._hand_back(queued, "was prefetched behind a handler that ran past its time limit")
        elif queued:
            why = f"waited over {BACKLOG_WAIT:g}s in the backlog (long handlers ahead of it)"
            w._hand_back(queued, why)
        for entry in stuck:
            fields = task_fields(entry.lease)
            event(
                w.log,
                logging.WARNING,
                "task still running",
                fields,
                time_limit=w.time_limit,
                why="its handler has not returned at twice its time limit; its slot stays "
                "taken until it does",
            )
        for entry in beats:
            self._beat(entry)
        if register:
            self._register()
        if summary:
            self._summarize()
        return True

    def _register(self) -> None:
        """Write the worker's row of the registry: the leases it holds, each since the
        queue's time of its claim (its first deadline less the lease's length).  An
        error is logged, and the write tried again RETRY_BEAT later."""
        w = self.worker
        started = w.clock.monotonic()
        length = w.queue.lease_seconds
        with self._cond:
            holds = [
                (e.lease.task_id, e.lease.token, max(0, e.lease.deadline - length))
                for e in w._running.values()
                if e.state in HELD and not e.lost
            ]
        try:
            w.queue.beat_worker(
                w.worker_id, every=w.heartbeat, concurrency=w.concurrency, holds=holds
            )
        except Exception as exc:
            if isinstance(exc, SchemaChanged):
                w.halt(exc)
            elif isinstance(exc, TRANSIENT):
                w._log_busy(exc)
            else:
                w.log.error("the worker registry could not be written", exc_info=True)
            due = w.clock.monotonic() + min(RETRY_BEAT, w.heartbeat)
        else:
            due = started + w.heartbeat
        with self._cond:
            self._register_at = due

    def _summarize(self) -> None:
        """The periodic summary: one INFO line with the outcomes since the last one,
        tasks per second, the backlog and the age of the oldest AVAILABLE task.
        The queue's figures are read without the write lock (Queue.snapshot)."""
        w = self.worker
        now = w.clock.monotonic()
        with self._cond:
            stats = replace(w._stats)
            assert self._summarized is not None and w.summary_every is not None
            since, before = self._summarized
            self._summarized = (now, stats)
            self._summary_at = now + w.summary_every
        try:
            figures = w.queue.snapshot()
        except TRANSIENT as exc:
            w._log_busy(exc)
            backlog, age = None, None
        else:
            backlog = figures.counts[State.AVAILABLE.value]
            age = figures.oldest_available_age
        done = {
            what: getattr(stats, what) - getattr(before, what)
            for what in ("completed", "failed", "dead", "lost")
        }
        elapsed = now - since
        rate = (done["completed"] + done["failed"]) / elapsed if elapsed > 0 else 0.0
        event(
            w.log,
            logging.INFO,
            "worker summary",
            done,
            tasks_per_second=rate,
            backlog=backlog,
            oldest_available=None if age is None else float(age),
            interval=float(elapsed),
        )

    def _beat(self, entry: Running) -> None:
        w = self.worker
        lease = entry.lease
        started = w.clock.monotonic()
        with self._cond:
            if entry.state not in BEATING:
                return  # finished, timed out or given back since the round began
        try:
            beat = w.queue.heartbeat(lease.task_id, lease.token)
        except Exception as exc:
            if isinstance(exc, SchemaChanged):
                w.halt(exc)
            elif isinstance(exc, Busy):
                w.log.warning("heartbeat of task %r: queue busy (%s)", lease.task_id, exc)
            else:
                w.log.error("heartbeat of task %r failed", lease.task_id, exc_info=True)
            with self._cond:
                entry.next_beat = w.clock.monotonic() + min(RETRY_BEAT, w.heartbeat)
            return
        with self._cond:
            entry.next_beat = started + w.heartbeat
            # None: the lease is gone, unless the handler finished meanwhile.
            lost = beat is None and entry.state in BEATING
            asked = beat is not None and beat.stop_requested and not entry.stop_requested
            entry.lost |= lost
            entry.stop_requested |= asked  # what sqlq.stop_requested() tells the handler
        if asked:
            event(w.log, logging.INFO, "task asked to stop", task_fields(lease), by="cancel")
        if lost:
            # Another worker may run the task now; this handler's result will be refused.
            event(w.log, logging.WARNING, "task lease lost", task_fields(lease), by="heartbeat")
