"""A Worker's periodic tasks: the schedules it ticks (``queue.tick``) in its claim loop,
and when the next is due by its clock."""

from __future__ import annotations

import math
from collections.abc import Iterable

from ..errors import TRANSIENT, InvalidConfig
from ..schedule import Schedule, check_schedule
from ..tasks import Tasks
from .state import BUSY_PAUSE, WorkerState


class Schedules(WorkerState):
    """Ticking the worker's schedules (see the sqlq.worker docstring)."""

    def _tick_schedules(self) -> bool:
        """Add the tasks of the schedules due by the worker's clock (queue.tick), and
        note when each is due next; True if tasks were added.  A transient error is
        logged and the schedule tried again after BUSY_PAUSE."""
        added = False
        for i, schedule in enumerate(self.schedules):
            now = self.clock.monotonic()
            if now < self._ticks[i]:
                continue
            try:
                ticked = self.queue.tick(schedule)
            except TRANSIENT as exc:
                self._log_busy(exc)
                self._ticks[i] = now + BUSY_PAUSE
                continue
            if ticked.added:
                added = True
                self.log.info(
                    "schedule %r: %d periodic task(s) added, %s",
                    schedule.name,
                    len(ticked.added),
                    " to ".join(dict.fromkeys((ticked.added[0], ticked.added[-1]))),
                )
            wait = math.inf if ticked.next_at is None else max(0, ticked.next_at - ticked.now)
            self._ticks[i] = now + wait
        return added

    def _next_tick(self) -> float | None:
        """When the next schedule is due, by the worker's clock (None: no schedules)."""
        return min(self._ticks, default=None)

    def _until_tick(self, seconds: float) -> float:
        """``seconds``, or less if a schedule is due sooner (an idle pause ends then)."""
        due = self._next_tick()
        return seconds if due is None else min(seconds, max(0.0, due - self.clock.monotonic()))

    def _tick_due(self) -> bool:
        due = self._next_tick()
        return due is not None and self.clock.monotonic() >= due


def _schedules(handler: object, given: Iterable[Schedule], limit: int) -> list[Schedule]:
    """The schedules a worker runs: those given, and a Tasks registry's, each with
    payloads of at most ``limit`` bytes (the queue's)."""
    if isinstance(given, Schedule) or not isinstance(given, Iterable):
        raise InvalidConfig("schedules must be an iterable of sqlq.Schedule")
    found = [check_schedule(schedule) for schedule in given]
    if isinstance(handler, Tasks):
        for schedule in found:
            handler.check_runs(schedule)
        found += handler.schedules
    for schedule in found:
        schedule.check_payload(limit)
    names = [schedule.name for schedule in found]
    if len(set(names)) != len(names):
        raise InvalidConfig(f"two schedules of a worker have the same name: {sorted(names)}")
    return found
