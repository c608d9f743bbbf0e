"""WorkQueue's control: cancel, pause and resume, and the per-key limits (see
sqlq.contract)."""

from __future__ import annotations

from ..contract import Cancel, Limit, Number, check_limit, check_task_id, limit_key
from ..records import GroupUse
from .engine import Engine
from .layout import (
    _AVAILABLE,
    _CANCELLED,
    _ENDED,
    _ERROR,
    _GROUP,
    _RESERVED,
    _STATE,
    _STOP,
    _WAITING,
    _applied,
    _finish,
)


class Control(Engine):
    """cancel, pause, resume; set_limit, remove_limit, limits, groups."""

    def cancel(self, task_id: str, now: Number) -> Cancel | None:
        """Cancel a task: one not started (AVAILABLE or WAITING) is CANCELLED at once;
        a running one (RESERVED) is asked to stop (see sqlq.contract).  None, and no
        change, for anything else."""
        task_id = check_task_id(task_id)
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None:
            return None
        state = record[_STATE]
        if state is _RESERVED:
            self._plain = False
            if record[_STOP] is None:
                record[_STOP] = now
            return Cancel.STOPPING
        if state is not _AVAILABLE and state is not _WAITING:
            return None
        self._unqueue(task_id, state)
        _finish(record, _CANCELLED, now, record[_ERROR])
        return Cancel.CANCELLED

    def pause(self, now: Number) -> bool:
        """Hand out no leases until ``resume`` (see sqlq.contract); False if the queue
        was paused already."""
        self._advance(now)
        was, self._paused = self._paused, True
        self._plain = False
        return not was

    def resume(self, now: Number) -> bool:
        """Hand out leases again; False if the queue was not paused."""
        self._advance(now)
        was, self._paused = self._paused, False
        return was

    @property
    def paused(self) -> bool:
        """Is the queue paused?"""
        return self._paused

    def set_limit(
        self,
        group: str | None,
        now: Number,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: Number | None = None,
    ) -> None:
        """Limit the tasks of ``group`` (None: the default of groups without limits of
        their own): at most ``concurrency`` leases at once, at most ``rate`` starts per
        ``per`` seconds, spaced ``per / rate`` apart (see sqlq.Queue.set_limit)."""
        key = limit_key(group)
        limit = check_limit(concurrency, rate, per)
        self._advance(now)
        self._limits[key] = limit
        self._apply_limits(key)

    def remove_limit(self, group: str | None, now: Number) -> bool:
        """Forget the limits set for ``group`` (None: the default); False if none were."""
        key = limit_key(group)
        self._advance(now)
        if self._limits.pop(key, None) is None:
            return False
        self._apply_limits(key)
        return True

    def limits(self, now: Number) -> dict[str | None, Limit]:
        """The limits set, by group (None: the default)."""
        self._advance(now)
        return {group or None: limit for group, limit in sorted(self._limits.items())}

    def groups(self, now: Number) -> dict[str, GroupUse]:
        """Each group with unfinished tasks: its leases now and its unfinished tasks
        (walks the tasks: O(n))."""
        self._advance(now)
        unfinished: dict[str, int] = {}
        for record in self._tasks.values():
            if record[_GROUP] is not None and record[_STATE] not in _ENDED:
                unfinished[record[_GROUP]] = unfinished.get(record[_GROUP], 0) + 1
        return {
            name: GroupUse(self._groups[name].running, count)
            for name, count in sorted(unfinished.items())
        }

    def _apply_limits(self, key: str) -> None:
        """The limits as they apply to the groups ``key`` concerns (every group for the
        default ''); a shorter spacing (or none) moves a group's next start back by the
        difference (see sqlq.contract)."""
        for name, group in self._groups.items():
            if key in ("", name):
                cap, spacing = _applied(self._limit_of(name))
                group.tat -= max(0, (group.spacing or 0) - (spacing or 0))
                group.cap, group.spacing = cap, spacing
                self._push(name, group)
