"""One call's transaction on PostgreSQL (see sqlq.backend.Transaction): the call's
turn and clock on entry (BEGIN sent with the first statement), the call's
statements, savepoints where concurrent writers may collide, notifications of
tasks that became AVAILABLE, the commit or rollback on exit.  The statements both
backends run alike are sqlq.sqlstore's.
"""

from __future__ import annotations

import time
from contextlib import suppress
from operator import itemgetter
from typing import Any, NoReturn, TypeVar

from ..backend import Claimed, Figures, Holder, Opened, TaskRow, claim_each
from ..contract import MAX_TIME, Completion, Number, State
from ..errors import InvariantViolation, SchemaChanged
from ..payload import Encoded
from ..sqlstore import Adding, Batch, SqlCalls, event_row
from . import driver
from .driver import psycopg
from .inspection import Inspection, figures
from .queries import Q
from .rows import claimed, new_task, task_row
from .text import read, read_or_none, stored, stored_or_none

T = TypeVar("T")

#: How far (seconds) the high-water mark may lag behind the server's clock: calls
#: that take the server's time raise it only when it is further behind, so that
#: a caller's own clock (``Queue(clock=...)``) or ``now`` is never more than this
#: behind the server's time of earlier calls.
MARK_LAG = 1.0


#: The unique index that lets one task of a queue hold a dedupe key (migration 0006).
KEY_HOLDER_INDEX = "sqlq_tasks_key_holder"


class PostgresTransaction(SqlCalls):
    """One call's transaction and statements; see sqlq.backend.Transaction.

    A call at the server's time in the default mode opens lazily: nothing is sent
    until its first statement.  If that is a write (insert, claim, complete,
    extend), the clock and the due check are folded into it (see queries.sql,
    _call): with nothing due it is the call's only round trip before COMMIT (a
    one-write call runs it in autocommit: its only round trip).  Anything else
    first (reading ``now``, ``mark`` or ``events``, another statement) opens the
    call as the other modes do: open_call, then the due events if any.
    """

    __slots__ = (
        "_announce",
        "_asked",
        "_autocommit",
        "_backend",
        "_callers_path",
        "_cur",
        "_events",
        "_external",
        "_locked",
        "_mark",
        "_now",
        "_one_write",
        "_opened",
        "_pending",
        "queue",
    )

    q = Q
    stored = staticmethod(stored)
    read_or_none = staticmethod(read_or_none)
    stored_or_none = staticmethod(stored_or_none)
    task_row = staticmethod(task_row)

    def __init__(
        self,
        backend: Inspection,
        now: Number | None,
        queue: str,
        external: Any,
        opened: Opened,
        one_write: bool = False,
    ) -> None:
        self._backend = backend
        self._asked = now
        self._one_write = one_write
        self._autocommit = False
        self._pending = False  # opened lazily, nothing sent yet
        self._callers_path = ""
        self._mark: Number = 0.0  # set once the call has read the clock
        self._now: Number = 0.0
        self.queue = queue
        self._external = external
        self._opened = opened
        self._cur: Any = None
        self._locked = False
        self._announce = False  # a task became AVAILABLE: NOTIFY before commit
        self._events: list[tuple[Number, int, TaskRow]] = []

    @property
    def now(self) -> Number:
        if self._pending:
            self._open()
        return self._now

    @property
    def mark(self) -> Number:
        if self._pending:
            self._open()
        return self._mark

    @property
    def events(self) -> list[tuple[Number, int, TaskRow]]:
        if self._pending:
            self._open()
        return self._events

    def __enter__(self) -> PostgresTransaction:
        backend = self._backend
        try:
            if self._external is not None:
                self._cur = backend._external_connection(self._external).cursor()
                self._cur.execute(Q.savepoint)
                row = self._cur.execute(Q.use_schema, {"schema": backend.schema}).fetchone()
                self._callers_path = row[0]
                self._open_with(self._cur)
                return self
            self._cur = backend.start_call(time.monotonic() + backend.busy_timeout)
            self._locked = True
            if self._asked is None and not backend.strict:
                self._pending = True  # see the class docstring
            else:
                self._cur = backend.send_first(Q.begin, {})
                self._open_with(self._cur)
        except BaseException as exc:
            self._fail(exc)
        return self

    def _open(self) -> None:
        """Open a lazy call whose first statement is no write of its own: open_call (in
        autocommit, for a one-write call: if nothing is due, its statements each run
        as a transaction of their own), then what ``_after_clock`` does."""
        self._pending = False
        backend = self._backend
        if not self._one_write:
            self._cur = backend.send_first(Q.begin, {})
            self._open_with(self._cur)
            return
        self._cur = backend.send_first(Q.open_call, self._call_params(None))
        mark, now, due, serial = self._cur.fetchone()
        if due is None:  # the database was migrated under this process
            self._changed()
        if not due and not serial and now <= mark + MARK_LAG:
            self._mark, self._now, self._autocommit = mark, now, True
            return
        self._cur.execute(Q.begin)
        if serial:  # the turn open_call took ended with it: taken again, first
            self._cur.execute(Q.lock_queue, {"queue": self.queue})
        self._after_clock(mark, now, due)

    def _open_with(self, cur: Any) -> None:
        """In the call's transaction: strict mode's turn, open_call, the due events."""
        if self._backend.strict:
            cur.execute(Q.lock_queue, {"queue": self.queue})
        mark, now, due, _ = cur.execute(Q.open_call, self._call_params(None)).fetchone()
        self._after_clock(mark, now, due)

    def _after_clock(self, mark: Number, now: Number, due: bool | None) -> None:
        """The call's time is known: if something is due (and, in the default mode,
        this call wins the queue's turn), read the due events; run ``opened`` if
        anything is due or the time asked was behind the mark."""
        cur, queue, asked = self._cur, self.queue, self._asked
        if due is None:  # the database was migrated under this process
            self._changed()
        self._mark, self._now = mark, now
        if due and not self._backend.strict:
            due = cur.execute(Q.try_lock_queue, {"queue": queue}).fetchone()[0]
        if due:
            rows = cur.execute(Q.due_events, {"queue": queue, "now": now}).fetchall()
            self._events = [(row[0], row[1], event_row(row, read)) for row in rows]
        if due or (asked is not None and asked < mark):
            self._opened(self, now if asked is None else asked)

    def _changed(self) -> NoReturn:
        """Raise SchemaChanged: the call found the database migrated under its process."""
        from ..version import __version__

        backend = self._backend
        found = self._cur.execute(Q.schema_stamp).fetchone()[0]
        raise SchemaChanged(
            f"{backend.name}: the database was migrated to schema version {found} while "
            f"this process (sqlq {__version__}) had it open at version "
            f"{backend.schema_version}; stop this process and start it again with a sqlq "
            "that knows the new schema"
        )

    def _call_params(self, now: Number | None, serial: bool = True) -> dict[str, Any]:
        """The parameters of _call (queries.sql): the call's time once known, and
        whether the call takes the queue's turn in a queue with grouped tasks (every
        call but a claim: see _call's lock order)."""
        return {
            "queue": self.queue,
            "now": now,
            "asked": self._asked,
            "lag": MARK_LAG,
            "schema": self._backend.schema_version,
            "serial": serial,
        }

    def _write(
        self, statement: str, params: dict[str, Any], serial: bool = True
    ) -> list[tuple[Any, ...]]:
        """Run a statement that starts with _call (queries.sql); its rows without the
        clock's four columns.  The first statement of a lazy call carries the clock
        and the due check; if something is due (or the mark must be raised) it
        changed nothing, and runs again once the call has opened.  ``serial``
        false: a claim, which needs no turn (see _call)."""
        params.update(self._call_params(None if self._pending else self._now, serial))
        if self._pending:
            self._pending = False
            commits = self._autocommit = self._one_write
            self._cur = self._backend.send_first(statement, params, not commits, commits)
            rows = self._cur.fetchall()
            mark, now, due, go = rows[0][:4]
            self._mark, self._now = mark, now
            if go:
                return [row[4:] for row in rows]
            if commits:
                self._autocommit = False
                self._cur.execute(Q.begin)
            self._after_clock(mark, now, due)
            params["now"] = now
        return [row[4:] for row in self._cur.execute(statement, params).fetchall()]

    def _commit(self) -> None:
        cur = self._cur
        if self._pending:  # nothing was sent: nothing to end
            self._pending = False
            return
        lag = 0.0 if self._asked is not None else MARK_LAG
        if self._now > self._mark + lag:
            cur.execute(Q.raise_mark, {"now": self._now, "lag": lag})
        if self._announce:
            cur.execute(Q.announce, {"channel": self._backend.channel(self.queue)})
        if self._external is not None:
            cur.execute(Q.restore_search_path, {"path": self._callers_path})
            cur.execute(Q.release_savepoint)
        elif not self._autocommit:
            cur.execute(Q.commit)

    def _fail(self, exc: BaseException) -> NoReturn:
        """Undo the call and raise: a psycopg error as its sqlq error, the cause kept."""
        try:
            self._abort()
            if isinstance(exc, psycopg.Error):
                if self._external is None:
                    raise self._backend._translated(exc) from exc
                raise driver.translate(exc, self._backend.name) from exc
            raise exc
        finally:
            self._unlock()

    def _abort(self) -> None:
        cur = self._cur
        if cur is None or cur.closed or cur.connection.closed or self._autocommit or self._pending:
            return
        with suppress(psycopg.Error):
            if self._external is None:
                cur.execute(Q.rollback)
            else:
                cur.execute(Q.rollback_to_savepoint)
                cur.execute(Q.release_savepoint)

    @property
    def _cursor(self) -> Any:
        """The call's cursor, once the call has opened (for statements without _call)."""
        if self._pending:
            self._open()
        return self._cur

    def _announce_if(self, available: bool) -> None:
        self._announce |= available

    def _figures(self, cur: Any, queue: str) -> Figures:
        return figures(cur, queue)

    def _unlock(self, committed: bool = False) -> None:
        """(``committed``: nothing more to do after a commit; the server keeps its log.)"""
        if self._locked:
            self._locked = False
            self._backend.end_call()

    def _add(self, how: Adding, task_id: str, payload: Encoded, name: str | None) -> bool:
        params = new_task(how, task_id, payload, name)
        params["channel"] = self._backend.channel(how[0])  # (Adding: the queue first)
        ((added, _announced),) = self._write(Q.insert_task, params)
        return bool(added)

    def _add_many(self, how: Adding, batch: Batch) -> list[bool]:
        """The ids the queue has are found first, so that only new ones take counter
        values; an id that another call adds meanwhile is skipped, and answered
        False."""
        queue, max_attempts, retry, run_at, priority, aging, group = how
        ids = [stored(task_id) for task_id, _, _ in batch]
        params: dict[str, Any] = {"queue": queue, "ids": ids}
        seen = {row[0] for row in self._cursor.execute(Q.existing_ids, params)}
        fresh: dict[str, tuple[Encoded, str | None]] = {}
        for key, (_, payload, name) in zip(ids, batch, strict=True):
            if key not in seen and key not in fresh:
                fresh[key] = (payload, name)
        if fresh:
            items = list(fresh.values())
            params = {
                "queue": queue,
                "ids": list(fresh),
                "payloads": [p if isinstance(p, str) else None for p, _ in items],
                "blobs": [p if isinstance(p, bytes) else None for p, _ in items],
                "names": [name for _, name in items],
                "state": "AVAILABLE" if run_at is None else "WAITING",
                "max_attempts": max_attempts,
                "run_at": run_at,
                "kind": retry.kind,
                "base": retry.base,
                "cap": retry.cap,
                "now": self._now,
                "group_key": group,
                "channel": self._backend.channel(queue),
                "priority": priority,
                "aging": aging,
            }
            added = {row[0] for row in self._cursor.execute(Q.insert_many, params)}
        else:
            added = set()
        answers = []
        for key in ids:
            answers.append(key in added)
            added.discard(key)  # a repeat in the batch existed by then
        return answers

    def claim_many(self, queue: str, n: int, seconds: Number, fair: bool = False) -> list[Claimed]:
        params = {"queue": queue, "n": n, "seconds": seconds, "max_time": MAX_TIME}
        found = self._write(Q.claim_front_many, params, serial=False)
        if found[0][0]:  # grouped tasks: one at a time, each may use up a group's slot
            return claim_each(lambda: self._claim_grouped(queue, seconds, fair), n)
        rows = [claimed(row[1:]) for row in found if row[1]]
        rows.sort(key=itemgetter(1))
        return rows

    def complete_many(self, queue: str, items: list[Completion]) -> int:
        params = {
            "queue": queue,
            "ids": [stored(task_id) for task_id, _, _ in items],
            "tokens": [token for _, token, _ in items],
            "results": [result for _, _, result in items],
        }
        ((done,),) = self._write(Q.complete_many, params)
        return int(done)

    def claim(self, queue: str, seconds: Number, fair: bool = False) -> Claimed | None:
        params = {"queue": queue, "seconds": seconds, "max_time": MAX_TIME}
        ((grouped, *row),) = self._write(Q.claim_front, params, serial=False)
        if grouped:
            return self._claim_grouped(queue, seconds, fair)
        return claimed(tuple(row)) if row[0] else None

    def _claim_grouped(self, queue: str, seconds: Number, fair: bool) -> Claimed | None:
        params = {"queue": queue, "seconds": seconds, "max_time": MAX_TIME, "fair": fair}
        (row,) = self._write(Q.claim_grouped, params, serial=False)
        return claimed(row) if row[0] else None

    def lease(self, queue: str, task_id: str, token: int | None) -> TaskRow | None:
        cur = self._cursor  # (first: the call's time is known once it opened)
        params = {"queue": queue, "task_id": stored(task_id), "token": token, "now": self._now}
        row = cur.execute(Q.get_current_lease, params).fetchone()
        return None if row is None else task_row(row)

    def complete(
        self, queue: str, task_id: str, token: int | None, result: str | None = None
    ) -> bool:
        params = {"queue": queue, "task_id": stored(task_id), "token": token, "result": result}
        ((done,),) = self._write(Q.complete_task, params)
        return bool(done)

    def _end_lease(self, task: TaskRow, state: State, params: dict[str, Any]) -> int:
        row = self._cursor.execute(Q.end_lease, params).fetchone()
        self._announce |= state is State.AVAILABLE
        if row is None:
            raise InvariantViolation(
                f"task {task.task_id!r} was no longer RESERVED under its lease"
            )
        return int(row[0])

    def extend(self, queue: str, task_id: str, token: int, seconds: Number) -> bool | None:
        params = {
            "queue": queue,
            "task_id": stored(task_id),
            "token": token,
            "seconds": seconds,
            "max_time": MAX_TIME,
        }
        ((stop,),) = self._write(Q.extend_lease, params)
        return None if stop is None else bool(stop)

    def wake(self, task: TaskRow, order: int, at: Number) -> None:
        cur = self._cursor  # (first: the call's time is known once it opened)
        params = {"id": task.row_id, "order": order, "at": at, "now": self._now}
        if cur.execute(Q.wake_task, params).rowcount != 1:
            raise InvariantViolation(f"task {task.task_id!r} was no longer WAITING")
        self._announce = True

    def redrive(self, row_ids: list[int]) -> int:
        """The rows of the tasks' groups are made or locked first, in one statement, in
        group-key order (remake_groups): taken task by task, two redrives of tasks of
        two idle or forgotten groups in opposite orders could each hold one group's
        row and wait for the other's (a deadlock, Busy; such a queue has no unfinished
        grouped task, so its calls do not take the queue's turn).

        A task with a dedupe key is updated in a savepoint: a holder of its key that
        a concurrent add committed after this call's probe makes the unique index
        refuse the update, and the task stays DEAD (as when the probe sees the holder)
        without undoing the call.  A task without a key needs none."""
        cur = self._cursor
        cur.execute(Q.remake_groups, {"ids": row_ids})
        moved = 0
        for row_id in row_ids:
            params = {"id": row_id, "now": self._now, "keyed": False}
            redriven = cur.execute(Q.redrive_task, params).rowcount == 1
            if not redriven:  # it has a key (or is no longer DEAD)
                redriven = self._redrive_keyed(cur, {**params, "keyed": True})
            moved += redriven
        self._announce |= moved > 0
        return moved

    def _redrive_keyed(self, cur: Any, params: dict[str, Any]) -> bool:
        cur.execute(Q.savepoint_redrive)
        try:
            redriven: bool = cur.execute(Q.redrive_task, params).rowcount == 1
        except psycopg.errors.UniqueViolation as exc:
            if exc.diag.constraint_name != KEY_HOLDER_INDEX:
                raise
            cur.execute(Q.rollback_redrive)
            return False
        cur.execute(Q.release_redrive)
        return redriven

    def dead_ids(self, queue: str, limit: int) -> list[tuple[int, str]]:
        params = {"queue": queue, "limit": None if limit < 0 else limit}
        rows = self._cursor.execute(Q.dead_ids, params)
        return [(row_id, read(task_id)) for row_id, task_id in rows]

    def forget_groups(self, queue: str, after: str, batch: int) -> tuple[int, str | None]:
        cur = self._cursor
        params = {"queue": queue, "after": after, "batch": batch, "now": self._now}
        forgotten, last, seen = cur.execute(Q.forget_groups, params).fetchone()
        return int(forgotten), last if seen == batch else None

    def _progress(self, params: dict[str, Any]) -> bool:
        ((reported,),) = self._write(Q.report_progress, params)
        return bool(reported)

    def key_holder(self, queue: str, key: str, cutoff: Number | None) -> Holder | None:
        params = {"queue": queue, "key": key, "cutoff": cutoff}
        row = self._cursor.execute(Q.key_holder, params).fetchone()
        return None if row is None else Holder(row[0], read(row[1]), State(row[2]), row[3])

    def _add_keyed(
        self, how: Adding, task_id: str, payload: Encoded, name: str | None, key: str
    ) -> bool:
        cur = self._cursor  # (first: the call's time is known once it opened)
        params = new_task(how, task_id, payload, name)
        params.update(key=key, now=self._now)
        added = cur.execute(Q.insert_keyed_task, params).fetchone() is not None
        self._announce |= added and how[3] is None  # (Adding: run_at fourth)
        return added

    def debounce(self, holder: Holder, payload: Encoded, run_at: Number | None) -> bool:
        cur = self._cursor
        params = {
            "id": holder.row_id,
            "state": holder.state.value,
            "seen": holder.seq,
            "stays": run_at is None and holder.state is State.AVAILABLE,
            "run_at": run_at,
            "payload": payload if isinstance(payload, str) else None,
            "payload_bytes": payload if isinstance(payload, bytes) else None,
            "now": self._now,
        }
        changed = cur.execute(Q.debounce_task, params).fetchone() is not None
        self._announce |= changed and run_at is None and holder.state is State.WAITING
        return changed
