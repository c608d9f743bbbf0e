"""Queue's adds: add (with dedupe keys and debounce), add_many, and the schedules' ticks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, overload

from .. import payload as payloads
from ..backend import Transaction
from ..contract import (
    NO_PRIORITY,
    NO_START,
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
from ..records import ScheduleState
from ..retry import Retry
from ..rules import key_cutoff
from ..schedule import Schedule, Ticked, check_schedule, encoded_tasks, plan
from .calls import Calls
from .engine import _waiting

if TYPE_CHECKING:  # the backend loads SQLAlchemy when a Queue opens its database
    import sqlalchemy as sa


class Adding(Calls):
    """add, add_many, tick and forget_schedule."""

    @overload
    def add(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        conn: sa.Connection | None = None,
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
        now: Number | None = None,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        conn: sa.Connection | None = None,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        key: str,
        on_key: str | None = None,
        key_window: Number | None = None,
        group: str | None = None,
    ) -> Added: ...

    def add(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        conn: sa.Connection | None = None,
        name: str | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        **options: Any,
    ) -> bool | Added:
        """Put a new task at the back of the line (or WAITING until its delay is over).

        False, and no change, if the id exists in any state.  With ``conn`` (a
        connection of ``self.engine`` in an open transaction) the task is added in
        that transaction: it exists only if the caller commits.  ``name`` is stored
        with the task and its leases carry it; ``max_attempts`` and ``retry``
        replace the queue's for this task.  The options of issue 13, by keyword (as
        the overloads above and ``_add`` name them): ``group`` (a tenant, a user, an
        API) puts it under that group's limits (see ``set_limit``); ``priority`` (an
        int from -1000 to 1000, higher first) places it in the line with the queue's
        ``aging`` (see sqlq.contract); with ``key`` (a dedupe key), ``on_key``
        ("refuse", "merge" or "debounce") and ``key_window`` (seconds) say what
        happens if another task holds the key, and the answer is an
        :class:`sqlq.keys.Added` naming the holder (see sqlq.keys).

        Those five come as ``**options`` so that an add that uses none of them pays
        for none: at every call CPython looks up the default of each keyword-only
        argument not given (about 150 instructions each), where an empty
        ``**options`` costs about 120.  The options older than them keep their
        keyword-only places, so an add with a name, a delay or conn= stays on this
        path too; an add with any of the five goes to ``_add`` (about 3,600 more),
        which takes every option by name, so that an unknown one is a TypeError.
        """
        if options:
            return self._add(
                task_id, now, payload=payload, delay=delay, run_at=run_at, conn=conn,
                name=name, max_attempts=max_attempts, retry=retry, **options,
            )  # fmt: skip
        task_id = check_new_task_id(task_id)
        encoded = None if payload is None else payloads.encode(payload, self.max_payload_bytes)
        start = NO_START if delay is None and run_at is None else check_start(delay, run_at)
        if name is None and max_attempts is None and retry is None:
            limit, policy = self.max_attempts, self.retry
        else:
            name = check_task_name(name)
            limit, policy = self._policy(max_attempts, retry)
        with self._call(now, conn, True) as tx:  # (one_write: an insert)
            waiting = None if start is NO_START else _waiting(tx.now, first_run(tx.now, start))
            return tx.insert(
                self.queue, task_id, limit, policy, encoded, waiting, name,
                priority=NO_PRIORITY, aging=self.aging, group=None,
            )  # fmt: skip

    def _add(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        payload: Any = None,
        delay: Number | None = None,
        run_at: Number | None = None,
        conn: sa.Connection | None = None,
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
        if (  # the usual case: no rare option to check, at once
            name is None
            and max_attempts is None
            and retry is None
            and group is None
            and priority is NO_PRIORITY  # the int 0 itself: not False, not 0.0
            and key is None
            and on_key is None
            and key_window is None
        ):
            limit, policy = self.max_attempts, self.retry
        else:
            name = check_task_name(name)
            group = check_group(group)
            priority = check_priority(priority)
            limit, policy = self._policy(max_attempts, retry)
            if key is not None or on_key is not None or key_window is not None:
                rule = check_key(key, on_key, key_window)
                with self._call(now, conn) as tx:
                    waiting = (
                        None if start is NO_START else _waiting(tx.now, first_run(tx.now, start))
                    )
                    task = (task_id, limit, policy, encoded, waiting, name)
                    return self._add_keyed(tx, rule, task, priority, group)
        with self._call(now, conn, one_write=True) as tx:
            waiting = None if start is NO_START else _waiting(tx.now, first_run(tx.now, start))
            return tx.insert(
                self.queue, task_id, limit, policy, encoded, waiting, name,
                priority=priority, aging=self.aging, group=group,
            )  # fmt: skip

    def _add_keyed(
        self,
        tx: Transaction,
        rule: KeyRule,
        task: tuple[str, int, Retry, payloads.Encoded, Number | None, str | None],
        priority: int,
        group: str | None,
    ) -> Added:
        """add with a dedupe key (see sqlq.keys): the holder first, then the insert.
        On PostgreSQL a concurrent call may take the key, or move its holder, between
        this call's statements: the insert or the debounce then changes nothing, and
        the holder is looked up again (it is the other call's now)."""
        task_id, limit, policy, encoded, waiting, name = task
        cutoff = key_cutoff(tx.now, rule.window)
        while True:
            holder = tx.key_holder(self.queue, rule.key, cutoff)
            if holder is not None:
                outcome = on_holder(rule.on_key, holder.state)
                if outcome is not Keyed.DEBOUNCED or tx.debounce(holder, encoded, waiting):
                    return Added(outcome, holder.task_id)
            elif tx.insert(self.queue, task_id, limit, policy, encoded, waiting, name,
                           priority=priority, aging=self.aging, group=group,
                           key=rule.key):  # fmt: skip
                return Added(Keyed.ADDED, task_id)
            elif tx.get(self.queue, task_id) is not None:
                return Added(Keyed.EXISTS, None)

    def add_many(
        self,
        items: Iterable[str | tuple[str, Any] | tuple[str, Any, str | None]],
        now: Number | None = None,
        *,
        delay: Number | None = None,
        run_at: Number | None = None,
        conn: sa.Connection | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        priority: int = 0,
        group: str | None = None,
    ) -> list[bool]:
        """``add`` for each item (an id, an (id, payload) pair or an (id, payload, name)
        triple), in one transaction; all with the same ``priority``,
        and all of ``group``, if given."""
        batch = check_batch(items, self.max_payload_bytes)
        start = check_start(delay, run_at)
        limit, policy = self._policy(max_attempts, retry)
        priority = check_priority(priority)
        group = check_group(group)
        with self._call(now, conn, one_write=True) as tx:
            waiting = _waiting(tx.now, first_run(tx.now, start))
            return tx.insert_many(
                self.queue,
                batch,
                limit,
                policy,
                waiting,
                priority=priority,
                aging=self.aging,
                group=group,
            )

    def tick(self, schedule: Schedule, now: Number | None = None) -> Ticked:
        """Add the tasks of ``schedule``'s ticks due at ``now`` (see sqlq.schedule), one
        per tick however many processes tick it, and move its stored state on, in one
        transaction.  A Worker given schedules calls this when they are due."""
        schedule = check_schedule(schedule)
        limit, policy = self._policy(schedule.max_attempts, schedule.retry)
        while True:
            try:
                with self._call(now) as tx:
                    return self._tick(tx, schedule, limit, policy)
            except _Moved:  # another process moved the schedule on first: read it again
                continue

    def _tick(self, tx: Transaction, schedule: Schedule, limit: int, policy: Retry) -> Ticked:
        now = tx.now  # first: the call's time (and what fell due) before its reads
        found = tx.schedule(self.queue, schedule.name)
        seen = None if found is None else found.handled_until
        todo = plan(schedule, seen, now)
        batch = [
            (task_id, encoded, schedule.task)
            for task_id, encoded in encoded_tasks(schedule, todo.ticks, self.max_payload_bytes)
        ]  # one batch insert: a catch-up of many ticks is one statement, not one per tick
        inserted = tx.insert_many(self.queue, batch, limit, policy, None, aging=self.aging)
        added = [task_id for (task_id, _, _), new in zip(batch, inserted, strict=True) if new]
        last = todo.ticks[-1] if todo.ticks else None if found is None else found.last_enqueued
        state = ScheduleState(
            self.queue, schedule.name, schedule.task, schedule.spec, schedule.tz,
            schedule.catch_up, todo.cursor, last, now,
        )  # fmt: skip
        if (found is None or found[:-1] != state[:-1]) and not tx.save_schedule(state, seen):
            raise _Moved
        return Ticked(added, schedule.next_tick(todo.cursor), now)

    def forget_schedule(self, name: str, now: Number | None = None) -> bool:
        """Delete the stored state of the schedule ``name`` (a schedule no worker runs
        any more: `sqlq schedules` lists it until then); the tasks of its ticks stay.
        A worker that still has the schedule stores it again as a new one, whose first
        task is for its first tick after that.  False if it was not stored."""
        with self._call(now) as tx:
            return tx.forget_schedule(
                self.queue, check_name(name, "schedule name", InvalidArgument)
            )


class _Moved(Exception):
    """Another process moved a schedule on after this call read it: the call is
    rolled back and tried again."""
