"""Periodic tasks: schedules, their ticks, and which ticks a call enqueues.

A :class:`Schedule` names a cron expression (parsed by ``cronsim``) or a fixed
interval, in a time zone (``zoneinfo``).  Its *ticks* are the times it fires, in
whole Unix seconds:

* ``every=N``: the whole multiples of N seconds since the Unix epoch (so every
  process computes the same ticks; the zone does not matter).
* ``cron="..."``: the times the expression matches on the zone's wall clock.
  Around a change of the clock cronsim does what Debian's cron does.  An
  expression at fixed times (minute and hour fields that do not start with
  ``*``) fires once a day even then: a time in the hour that is skipped in
  spring fires at the first minute after the gap (02:30 fires at 03:00), and a
  time in the hour that repeats in autumn fires once, at its first occurrence.
  Any other expression follows the real time: it has no ticks in the skipped
  hour and fires in both occurrences of the repeated one.

One task per tick, whatever the number of schedulers: the task's id is
``<schedule name>@<tick in UTC, ISO 8601>`` (``report@2026-03-29T01:00:00Z``),
so a second add of the same tick is refused by the queue.  The database keeps,
per queue and schedule, the *cursor*: every tick up to it has been handled
(enqueued, or skipped by the policy).  ``Queue.tick`` and ``WorkQueue.tick``
read it, ask :func:`plan` what to enqueue, add those tasks and move the cursor
in one transaction (on a database, a compare-and-set on the cursor read), so a
tick is never enqueued twice, even after its task was purged.

A schedule seen for the first time starts at that moment: its first tick is the
first one after it.  Ticks that came while nothing ran are *missed*, and the
schedule's ``catch_up`` policy says what happens to them:

* ``"latest"`` (the default): only the most recent due tick is enqueued.
* ``"all"``: every due tick, oldest first, at most MAX_CATCH_UP per call (the
  next call goes on where it stopped: a worker catches up in steps, never with
  one huge transaction).
* ``"none"``: the most recent due tick only if it is at most ``grace`` seconds
  old (on time); older ticks are skipped, and the schedule waits for the next.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from . import payload as payloads
from .contract import (
    MAX_ID_BYTES,
    MAX_LEASE_SECONDS,
    Number,
    check_max_attempts,
    check_name,
    check_retry,
    check_task_name,
)
from .errors import InvalidConfig, InvalidPayload, PayloadTooLarge
from .payload import Encoded
from .retry import Retry

__all__ = ["MAX_CATCH_UP", "POLICIES", "Plan", "Schedule", "Ticked", "plan"]

#: The catch-up policies.
POLICIES: Final = ("all", "latest", "none")
#: Most tasks one call enqueues for one schedule (policy "all").
MAX_CATCH_UP: Final = 1000
#: The keyword argument that gives a task's function its tick (Unix seconds).
TICK_ARGUMENT: Final = "tick"
#: Ticks are computed up to this time (the end of year 9998): ``datetime``'s range.
_LAST_TIME: Final = datetime(9998, 12, 31, tzinfo=UTC).timestamp()
#: The last tick there can be (its payload's tick has the most digits).
_LAST_TICK: Final = int(_LAST_TIME)
#: "@2026-03-29T01:00:00Z": what a task id adds to the schedule's name.
_TICK_SUFFIX: Final = len("@2026-03-29T01:00:00Z")


@dataclass(frozen=True)
class Schedule:
    """A periodic task: ``cron`` or ``every`` (seconds), in the zone ``tz``.

    ``task`` is the name of the task each tick adds (a function of a
    :class:`sqlq.Tasks` registry), ``kwargs`` its payload; with ``with_tick`` the
    payload also carries the tick (Unix seconds) as ``tick``.  ``max_attempts``
    and ``retry`` replace the queue's for these tasks.  ``catch_up`` and ``grace``
    (seconds) decide what happens to missed ticks (see the module docstring).
    Everything is checked here: a bad expression, zone or policy is InvalidConfig.
    """

    name: str
    cron: str | None = None
    every: int | None = None
    tz: str = "UTC"
    catch_up: str = "latest"
    task: str | None = None
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    with_tick: bool = False
    grace: Number = 60
    max_attempts: int | None = None
    retry: Retry | None = None
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = check_name(self.name, "schedule name", InvalidConfig)
        if len(name.encode("utf-8")) > MAX_ID_BYTES - _TICK_SUFFIX:
            raise InvalidConfig(
                f"a schedule name is at most {MAX_ID_BYTES - _TICK_SUFFIX} characters "
                f"(bytes in UTF-8: its task ids add the tick's time, and an id is at most "
                f"{MAX_ID_BYTES})"
            )
        object.__setattr__(self, "zone", _zone(self.tz))
        self._check_timing(name)
        self._check_tasks(name)

    def _check_timing(self, name: str) -> None:
        """When it fires and what happens to missed ticks."""
        if (self.cron is None) == (self.every is None):
            raise InvalidConfig(f"schedule {name!r}: give cron or every, exactly one of them")
        if self.cron is not None:
            _check_cron(self.cron, name)
        else:
            _check_every(self.every, name)
        if self.catch_up not in POLICIES:
            raise InvalidConfig(
                f"schedule {name!r}: catch_up must be one of {', '.join(POLICIES)}, "
                f"not {self.catch_up!r}"
            )
        grace = self.grace
        if isinstance(grace, bool) or not isinstance(grace, int | float):
            raise InvalidConfig(f"schedule {name!r}: grace must be a number of seconds")
        if not 0 <= grace <= MAX_LEASE_SECONDS:
            raise InvalidConfig(f"schedule {name!r}: grace must be from 0 to {MAX_LEASE_SECONDS}")

    def _check_tasks(self, name: str) -> None:
        """The tasks it adds: their name, options and payload (kwargs kept as a dict)."""
        check_task_name(self.task, InvalidConfig)
        if not isinstance(self.with_tick, bool):
            raise InvalidConfig(f"schedule {name!r}: with_tick must be True or False")
        if self.max_attempts is not None:
            check_max_attempts(self.max_attempts)
        if self.retry is not None:
            check_retry(self.retry)
        if not isinstance(self.kwargs, Mapping):
            raise InvalidConfig(f"schedule {name!r}: kwargs must be a mapping")
        object.__setattr__(self, "kwargs", dict(self.kwargs))
        self.check_payload(payloads.DEFAULT_MAX_PAYLOAD_BYTES)

    def check_payload(self, limit: int) -> None:
        """InvalidConfig unless the payload of every tick (the last is the longest)
        can be stored in ``limit`` bytes (a queue's max_payload_bytes)."""
        try:
            payloads.encode(self.payload(_LAST_TICK), limit)
        except (InvalidPayload, PayloadTooLarge) as exc:
            raise InvalidConfig(f"schedule {self.name!r}: kwargs cannot be stored: {exc}") from None

    @classmethod
    def stored(cls, name: str, spec: str, tz: str, catch_up: str, task: str | None) -> Schedule:
        """The schedule as a database keeps it (``spec`` as :attr:`spec` gives it)."""
        kind, _, rest = spec.partition(" ")
        if kind == "every":
            return cls(name, every=int(rest), tz=tz, catch_up=catch_up, task=task)
        return cls(name, cron=rest, tz=tz, catch_up=catch_up, task=task)

    @property
    def spec(self) -> str:
        """What fires it, as stored: ``"cron */5 * * * *"`` or ``"every 300"``."""
        return f"cron {self.cron}" if self.cron is not None else f"every {self.every}"

    def task_id(self, tick: Number) -> str:
        """The id of the task of ``tick``: the name and the tick in UTC."""
        return f"{self.name}@{datetime.fromtimestamp(tick, UTC):%Y-%m-%dT%H:%M:%SZ}"

    def payload(self, tick: Number) -> dict[str, Any]:
        """The payload of the task of ``tick``."""
        if self.with_tick:
            return {**self.kwargs, TICK_ARGUMENT: tick}
        return dict(self.kwargs)

    def next_tick(self, after: Number) -> int | None:
        """The first tick later than ``after``; None if there is none (within
        datetime's range, or for 50 years for a cron expression)."""
        return next(self._ticks_after(after), None)

    def latest_tick(self, until: Number) -> int | None:
        """The last tick at or before ``until``; None if there is none."""
        until = min(until, _LAST_TIME)
        if self.every is not None:
            return math.floor(until / self.every) * self.every
        # cronsim's reverse iteration counts a fixed-time expression's times on the
        # naive wall clock, so in an hour that repeats it may land a day early (or on
        # a time the forward iteration does not give): the latest tick is the last of
        # the ticks forward from its answer, or from an earlier answer if none is.
        moment = math.floor(until) + 1
        while (found := self._tick_before(moment)) is not None:
            latest = None
            for tick in self._ticks_after(found - 1):
                if tick > until:
                    break
                latest = tick
            if latest is not None:
                return latest
            moment = found
        return None

    def _tick_before(self, moment: int) -> int | None:
        """A tick of the cron expression before ``moment`` (cronsim, backwards)."""
        start = datetime.fromtimestamp(moment, self.zone)
        return _first(CronSim(self.cron or "", start, reverse=True))

    def _ticks_after(self, after: Number) -> Iterator[int]:
        """The ticks later than ``after``, in order (up to _LAST_TIME)."""
        if after >= _LAST_TIME:
            return
        if self.every is not None:
            tick = (math.floor(after / self.every) + 1) * self.every
            while tick <= _LAST_TIME:
                yield tick
                tick += self.every
            return
        times = CronSim(self.cron or "", datetime.fromtimestamp(math.floor(after), self.zone))
        while (found := _first(times)) is not None and found <= _LAST_TIME:
            yield found


class Plan(NamedTuple):
    """What a call does for a schedule: the ticks to enqueue, oldest first, and the
    cursor it leaves (every tick up to it handled)."""

    ticks: list[int]
    cursor: Number


class Ticked(NamedTuple):
    """What ``tick`` did: the ids of the tasks it added (a tick another scheduler
    added first is not among them), the schedule's next tick after the call (None
    if there is none; at or before ``now`` while "all" is still catching up), and
    the time of the call."""

    added: list[str]
    next_at: int | None
    now: Number


def plan(schedule: Schedule, cursor: Number | None, now: Number) -> Plan:
    """The ticks to enqueue at ``now`` for ``schedule``, whose ticks up to ``cursor``
    are handled (None: a schedule seen for the first time, which starts now)."""
    if cursor is None:
        return Plan([], now)
    latest = schedule.latest_tick(now)
    if latest is None or latest <= cursor:
        return Plan([], cursor)
    if schedule.catch_up == "all":
        ticks: list[int] = []
        for tick in schedule._ticks_after(cursor):
            if tick > now or len(ticks) == MAX_CATCH_UP:
                break
            ticks.append(tick)
        return Plan(ticks, ticks[-1])
    if schedule.catch_up == "none" and now - latest > schedule.grace:
        return Plan([], latest)
    return Plan([latest], latest)


def encoded_tasks(schedule: Schedule, ticks: list[int], limit: int) -> list[tuple[str, Encoded]]:
    """(task id, encoded payload) of the tasks of ``ticks``; payloads of at most ``limit``
    bytes (the queue's)."""
    return [(schedule.task_id(t), payloads.encode(schedule.payload(t), limit)) for t in ticks]


def periodic_schedule(
    fn: Callable[..., object],
    task: str,
    name: str | None,
    options: dict[str, Any],
) -> Schedule:
    """The Schedule of ``@tasks.periodic``: named after the task unless ``name`` is
    given, with the tick passed if the function has a ``tick`` parameter."""
    takes_tick = TICK_ARGUMENT in inspect.signature(fn).parameters
    return Schedule(task if name is None else name, task=task, with_tick=takes_tick, **options)


def check_schedule(schedule: object) -> Schedule:
    if not isinstance(schedule, Schedule):
        raise InvalidConfig(f"expected a sqlq.Schedule, not {type(schedule).__name__}")
    return schedule


def _first(times: Iterator[datetime]) -> int | None:
    try:
        return int(next(times).timestamp())
    except (StopIteration, OverflowError, ValueError):
        return None


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str):
        raise InvalidConfig(f"tz must be a time zone name (a str), not {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidConfig(f"unknown time zone {tz!r} (an IANA name: 'Europe/Paris')") from None


def _check_cron(cron: object, name: str) -> None:
    if not isinstance(cron, str):
        raise InvalidConfig(f"schedule {name!r}: cron must be a str, not {type(cron).__name__}")
    try:
        CronSim(cron, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError) as exc:
        raise InvalidConfig(f"schedule {name!r}: invalid cron expression {cron!r}: {exc}") from None


def _check_every(every: object, name: str) -> None:
    if isinstance(every, bool) or not isinstance(every, int) or not 1 <= every <= MAX_LEASE_SECONDS:
        raise InvalidConfig(
            f"schedule {name!r}: every must be a whole number of seconds from 1 to "
            f"{MAX_LEASE_SECONDS}, not {every!r}"
        )
