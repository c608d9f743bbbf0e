"""WorkQueue's adds: add (with dedupe keys and debounce), add_many, and the schedules' ticks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, overload

from .. import payload as payloads
from ..contract import (
    MAX_ID_LENGTH,
    Number,
    check_batch,
    check_group,
    check_name,
    check_new_task_id,
    check_priority,
    check_start,
    check_task_name,
    first_run,
)
from ..errors import InvalidArgument
from ..keys import Added, Keyed, KeyRule, check_key, on_holder
from ..retry import Retry
from ..schedule import Schedule, Ticked, check_schedule, encoded_tasks, plan
from .engine import Engine
from .layout import _AVAILABLE, _FINISHED, _PAYLOAD, _STATE, _UPDATED, Record


class Adding(Engine):
    """add, add_many, tick and forget_schedule."""

    @overload
    def add(
        self,
        task_id: str,
        now: Number,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        key: None = None,
        on_key: None = None,
        key_window: None = None,
        group: str | None = None,
    ) -> bool: ...

    @overload
    def add(
        self,
        task_id: str,
        now: Number,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        key: str,
        on_key: str | None = None,
        key_window: Number | None = None,
        group: str | None = None,
    ) -> Added: ...

    def add(self, task_id: str, now: Number, **options: Any) -> bool | Added:
        """Put a new task at the back of the line (or WAITING until its delay is over).

        False, and no change, if the id exists in any state.  The options, by keyword
        (as the overloads above and ``_add`` name them): ``payload``; ``delay`` or
        ``run_at``; ``name``, stored with the task and carried by its leases;
        ``max_attempts`` and ``retry``, which replace the queue's for this task;
        ``priority`` (-1000 to 1000, higher first), which places it in the line with
        the queue's ``aging`` (see sqlq.contract); ``group``, which puts it under that
        group's limits (see ``set_limit``); ``key``, ``on_key`` and ``key_window``: a
        dedupe key, answered with an Added (see sqlq.keys).

        The options come as ``**options`` so that an add without any pays for none of
        them: at every call CPython looks the default of each keyword-only argument not
        given up in a dict (about 150 instructions each, 1,650 for these eleven), where
        an empty ``**options`` costs about 340.  ``_add`` takes them by name, so that an
        unknown one is a TypeError as before.
        """
        encoded = None
        if options:  # a payload alone, the most common option, stays on this path
            if len(options) != 1 or "payload" not in options:
                return self._add(task_id, now, **options)
            task_id = check_new_task_id(task_id)  # checked first, as _add does
            encoded = payloads.encode(options["payload"], self.max_payload_bytes)
        elif not (
            type(task_id) is str and task_id and len(task_id) <= MAX_ID_LENGTH and task_id.isascii()
        ):  # check_new_task_id's fast test (a non-empty str is true), inline
            task_id = check_new_task_id(task_id)
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        tasks = self._tasks
        if task_id in tasks:
            return False
        record = tasks[task_id] = [_AVAILABLE, 0, 0, now, encoded, None, now, now, None,
                                   self.max_attempts, self._retry, None, None, 0, None,
                                   0]  # fmt: skip
        if self._plain:  # _join_line, written out for a plain queue (see layout._SEQ)
            self._counter += 1
            self._line.append(task_id)
        else:
            self._join_line(task_id, record)
        return True

    def _add(
        self,
        task_id: str,
        now: Number,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        key: str | None = None,
        on_key: str | None = None,
        key_window: Number | None = None,
        group: str | None = None,
    ) -> bool | Added:
        """add with options, each checked."""
        task_id = check_new_task_id(task_id)
        encoded = payloads.encode(payload, self.max_payload_bytes)
        start = check_start(delay, run_at)
        policy = self._policy(max_attempts, retry)
        task = (encoded, check_task_name(name), *policy, check_priority(priority),
                check_group(group))  # fmt: skip
        if key is None and on_key is None and key_window is None:
            now = self._advance(now)
            return self._insert(task_id, task, now, first_run(now, start))
        rule = check_key(key, on_key, key_window)
        now = self._advance(now)
        return self._add_keyed(task_id, task, rule, now, first_run(now, start))

    def _add_keyed(
        self, task_id: str, task: tuple[Any, ...], rule: KeyRule, now: Number, run_at: Number
    ) -> Added:
        """add with a dedupe key (see sqlq.keys), as Queue decides it."""
        holders = self._keys.get(rule.key)
        holder = holders[-1] if holders else None  # the latest: the only one that can hold
        if holder is not None:
            record = self._tasks[holder]
            finished = record[_FINISHED]  # rules.holds_key, written out (no call per add)
            if finished is None or (rule.window is not None and finished > now - rule.window):
                outcome = on_holder(rule.on_key, record[_STATE])
                if outcome is Keyed.DEBOUNCED:
                    self._debounce(holder, record, task[0], now, run_at)
                return Added(outcome, holder)
        if not self._insert(task_id, task, now, run_at):
            return Added(Keyed.EXISTS, None)
        self._keys.setdefault(rule.key, []).append(task_id)
        self._key_of[task_id] = rule.key
        return Added(Keyed.ADDED, task_id)

    def _debounce(
        self, task_id: str, record: Record, encoded: Any, now: Number, run_at: Number
    ) -> None:
        """The holder, WAITING or AVAILABLE, takes the payload and runs at ``run_at``
        (an AVAILABLE one keeps its place in the line if that is now)."""
        record[_PAYLOAD] = encoded
        record[_UPDATED] = now
        if run_at <= now and record[_STATE] is _AVAILABLE:
            return
        self._unqueue(task_id, record[_STATE])
        if run_at > now:
            self._make_waiting(task_id, record, run_at, now)
        else:
            self._make_available(task_id, record, now)

    def add_many(
        self,
        items: Iterable[str | tuple[str, Any] | tuple[str, Any, str | None]],
        now: Number,
        *,
        delay: Number | None = None,
        run_at: Number | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        group: str | None = None,
    ) -> list[bool]:
        """``add`` for each item (an id, an (id, payload) pair or an (id, payload, name)
        triple), as one call; all with the same ``priority``
        and all of ``group``, if given."""
        batch = check_batch(items, self.max_payload_bytes)
        start = check_start(delay, run_at)
        policy = (*self._policy(max_attempts, retry), check_priority(priority), check_group(group))
        now = self._advance(now)
        when = first_run(now, start)
        return [
            self._insert(task_id, (encoded, name, *policy), now, when)
            for task_id, encoded, name in batch
        ]

    def tick(self, schedule: Schedule, now: Number) -> Ticked:
        """Add the tasks of ``schedule``'s ticks due at ``now`` (see sqlq.schedule), one
        per tick, and move the schedule on (its state is kept in memory)."""
        schedule = check_schedule(schedule)
        policy = self._policy(schedule.max_attempts, schedule.retry)
        now = self._advance(now)
        todo = plan(schedule, self._schedules.get(schedule.name), now)
        added = [
            task_id
            for task_id, encoded in encoded_tasks(schedule, todo.ticks, self.max_payload_bytes)
            if self._insert(task_id, (encoded, schedule.task, *policy, 0, None), now, now)
        ]
        self._schedules[schedule.name] = todo.cursor
        return Ticked(added, schedule.next_tick(todo.cursor), now)

    def forget_schedule(self, name: str, now: Number) -> bool:
        """Forget the state of the schedule ``name``: its next tick starts it anew (its
        tasks stay).  False if it was not known."""
        check_name(name, "schedule name", InvalidArgument)
        self._advance(now)
        return self._schedules.pop(name, None) is not None
