"""One call's transaction on SQLite (see sqlq.backend.Transaction): the write lock,
the clock and the due events on entry, the call's statements, the commit or
rollback on exit.  The statements both backends run alike are sqlq.sqlstore's.
"""

from __future__ import annotations

import json
import time
from contextlib import suppress
from typing import Any, NoReturn

from ..backend import Claimed, Figures, Holder, Opened, TaskRow, claim_each
from ..contract import Completion, Number, State, time_after
from ..errors import InvariantViolation
from ..payload import Encoded
from ..retry import stored_policy
from ..sqlstore import Adding, Batch, SqlCalls, event_row
from . import driver
from .inspection import figures
from .maintenance import WAL_CHECK_EVERY, Maintenance
from .migrate import GROUP_TRIGGERS, KEY_INDEXES, apply_on_demand
from .queries import Q


def _task_row(row: tuple[Any, ...]) -> TaskRow:
    (row_id, task_id, state, attempts, max_attempts, token, seq, kind, base, cap,
     deadline, run_at, payload, error, created, updated, finished, name, stop,
     result, progress, message, key, priority, group) = row  # fmt: skip
    return TaskRow(
        row_id, task_id, State(state), attempts, max_attempts, token, seq,
        stored_policy(kind, base, cap), deadline, run_at, payload, error,
        created, updated, finished, name, stop, result, progress, message, group,
        key, priority,
    )  # fmt: skip


class SqliteTransaction(SqlCalls):
    """One call's transaction and statements; see sqlq.backend.Transaction.

    A class-based context manager (not a generator) because it is on the hot
    path of every call.  On entry it takes the backend's lock, begins the write
    transaction (or a savepoint in the caller's) and reads the clock and whether
    anything is due in one statement (the due events in a second one, only when
    something is), then calls ``opened`` if something is due or the call's time
    was behind the mark; on exit it stores the clock and commits, or rolls back.
    DB-API errors leave as sqlq errors, the original as the cause.
    """

    __slots__ = (
        "_backend",
        "_conn",
        "_counter",
        "_cur",
        "_external",
        "_keys_made",
        "_locked",
        "_opened",
        "_plain",
        "_stored_counter",
        "events",
        "groups",
        "mark",
        "now",
        "paused",
        "queue",
    )

    q = Q
    task_row = staticmethod(_task_row)

    def __init__(
        self,
        backend: Maintenance,
        now: Number | None,
        queue: str,
        external: Any,
        opened: Opened,
        one_write: bool = False,
    ) -> None:
        self._backend = backend
        self.now: Number = time.time() if now is None else now  # (Queue gives it)
        self._plain = one_write  # claims nothing: open_plain_call
        self.queue = queue
        self._external = external
        self._opened = opened
        self._conn: Any = None
        self._cur: Any = None  # the cursor every statement of the call runs on
        self._locked = False
        self._keys_made = False
        self.events: list[tuple[Number, int, TaskRow]] = []

    def __enter__(self) -> SqliteTransaction:
        backend = self._backend
        try:
            if self._external is None:
                deadline = time.monotonic() + backend.busy_timeout
                if not backend._lock.acquire(False):
                    backend.wait_for_lock(deadline)
                self._locked = True
                self._conn = backend._conn or backend._connection()
                self._cur = backend._cursor
                backend.begin_write(self._cur, deadline)
            else:
                self._conn = backend._external_connection(self._external)
                self._cur = self._conn.cursor()
                self._cur.execute(Q.savepoint)
            cur = self._cur
            asked = self.now
            known = backend.schema_version
            if self._plain:  # the group and pause bits unknown (None): see _flags
                mark, counter, due = cur.execute(
                    Q.open_plain_call, (self.queue, asked, known)
                ).fetchone()
                self.groups: int | None = None
                self.paused: int | None = None
            else:
                mark, counter, flags = cur.execute(
                    Q.open_call, (self.queue, asked, known)
                ).fetchone()
                due = flags & 9  # (the bits as they are: only their truth is asked)
                self.groups = flags & 2  # the queue has grouped tasks not finished
                self.paused = flags & 4  # its claims find nothing
            self.mark: Number = mark
            self._counter: int = counter
            self._stored_counter = counter
            if due or asked < mark:
                if due & 8:  # the file was migrated under this process
                    raise backend.schema_changed(cur.execute(Q.schema_stamp).fetchone()[0])
                if asked < mark:
                    self.now = mark
                if due:
                    rows = cur.execute(Q.due_events, (self.queue, self.now)).fetchall()
                    self.events = [(row[0], row[1], event_row(row)) for row in rows]
                self._opened(self, asked)
        except BaseException as exc:
            self._fail(exc)
        return self

    def _commit(self) -> None:
        cur = self._cur
        moved = self.now != self.mark or self._counter != self._stored_counter
        if moved and cur.execute(Q.write_clock, (self.now, self._counter)).rowcount != 1:
            raise InvariantViolation("the database clock or counter would have gone down")
        cur.execute(Q.commit if self._external is None else Q.release_savepoint)

    def _fail(self, exc: BaseException) -> NoReturn:
        """Undo the call and raise: a DB-API error as its sqlq error, the cause kept."""
        if not isinstance(exc, driver.dbapi.Error):
            self._abort()
            raise exc
        try:
            self._abort(unlock=False)
            if self._external is None:
                error = self._backend._translated(exc)
            else:  # the caller's connection is the caller's to close
                error = driver.translate(exc, self._backend.path)
        finally:
            self._unlock()
        raise error from exc

    def _abort(self, unlock: bool = True) -> None:
        """Undo the call.  SQLite may have rolled back already (e.g. on SQLITE_FULL); a
        blind ROLLBACK would then raise a second, misleading error."""
        conn, cur = self._conn, self._cur
        try:
            if conn is not None and conn.in_transaction:
                with suppress(driver.dbapi.Error):
                    if self._external is None:
                        cur.execute(Q.rollback)
                    else:
                        cur.execute(Q.rollback_to_savepoint)
                        cur.execute(Q.release_savepoint)
        finally:
            if unlock:
                self._unlock()

    def _unlock(self, committed: bool = False) -> None:
        """Give up the gate and the backend's lock, if this call holds them (after a
        commit, checkpointing in between when one is due)."""
        if self._locked:
            self._locked = False
            backend = self._backend
            try:
                if committed:
                    backend._commits += 1
                    if backend._commits % WAL_CHECK_EVERY == 0:
                        backend._after_commit(self._conn)
            finally:
                try:
                    backend.end_write()
                finally:
                    backend._lock.release()

    @property
    def _cursor(self) -> Any:
        return self._cur

    def _figures(self, cur: Any, queue: str) -> Figures:
        return figures(cur, queue)

    def _next_id(self) -> int:
        self._counter += 1
        return self._counter

    def _add(self, how: Adding, task_id: str, payload: Encoded, name: str | None) -> bool:
        queue, max_attempts, retry, run_at, priority, aging, group = how
        if group is not None:
            self._grouping()
        if run_at is None and group is None and priority == 0:
            plain = (queue, task_id, self._counter + 1, max_attempts,
                     "" if payload is None else payload, retry.kind, retry.base, retry.cap,
                     self.now, name or "", aging)  # fmt: skip
            if self._cur.execute(Q.insert_plain_task, plain).rowcount != 1:
                return False
            self._counter += 1
            return True
        state = "AVAILABLE" if run_at is None else "WAITING"
        row = (queue, task_id, state, self._counter + 1, max_attempts, run_at or 0,
               "" if payload is None else payload, retry.kind, retry.base, retry.cap,
               self.now, name or "", priority, aging, group or "")  # fmt: skip
        if self._cur.execute(Q.insert_task, row).rowcount != 1:
            return False
        self._counter += 1
        return True

    def _flags(self) -> None:
        """Bits 2 and 4 of open_call, for a call opened as one that claims nothing (none
        of sqlq's does claim; this keeps a claim right if one ever did)."""
        flags = self._cur.execute(Q.queue_flags, (self.queue,)).fetchone()[0]
        self.groups, self.paused = flags & 2, flags & 4

    def _grouping(self) -> None:
        """Before a grouped task is added: the triggers that keep its group's row (the
        on-demand migration the first such add of the file applies, see
        migrations/on_demand/0001), and the claims of this call take the statements
        that know groups.  Asked once per backend object once they are there for good
        (as _keying), and not when the queue has groups in use (open_call's bit 2)."""
        if self.groups:
            return
        backend = self._backend
        if not backend.grouped:
            there = apply_on_demand(self._cur, GROUP_TRIGGERS)
            backend.grouped = there and self._external is None
        self.groups = True

    def _keying(self) -> None:
        """Before a statement that uses a dedupe key: the keys' indexes (the on-demand
        migration the first keyed add of the file applies, see migrations/on_demand/
        0002).  Asked once per backend object once they are there for good."""
        backend = self._backend
        if not backend.keyed and not self._keys_made:
            # Made by this call, or by an earlier call of the caller's transaction (conn=),
            # they go if it rolls back: asked again by the next call.
            there = apply_on_demand(self._cur, KEY_INDEXES)
            backend.keyed = there and self._external is None
            self._keys_made = not there

    def _add_many(self, how: Adding, batch: Batch) -> list[bool]:
        """One insert_batch of the whole batch when every id in it is new (the usual
        case); otherwise that is undone, the new ids are found first, and
        insert_task runs for them alone, so that only they take counter values."""
        queue, max_attempts, retry, run_at, priority, aging, group = how
        if group is not None and batch:
            self._grouping()
        if batch and self._insert_batch(how, batch):
            return [True] * len(batch)
        ids = json.dumps([item[0] for item in batch])
        seen = {row[0] for row in self._cur.execute(Q.existing_ids, {"queue": queue, "ids": ids})}
        group_text = group or ""  # insert_task takes no None
        added: list[bool] = []
        rows: list[tuple[Any, ...]] = []
        state = "AVAILABLE" if run_at is None else "WAITING"
        kind, base, cap, now = retry.kind, retry.base, retry.cap, self.now
        seq = self._counter
        for task_id, payload, name in batch:  # insert_task's parameters, built inline
            new = task_id not in seen
            added.append(new)
            if new:
                seen.add(task_id)
                seq += 1
                rows.append((queue, task_id, state, seq, max_attempts, run_at or 0,
                             "" if payload is None else payload, kind, base, cap, now,
                             name or "", priority, aging, group_text))  # fmt: skip
        self._counter = seq
        if rows:
            self._cur.executemany(Q.insert_task, rows)
        return added

    def _insert_batch(self, how: Adding, batch: Batch) -> bool:
        """insert_batch, kept if it added every task; False (and nothing changed) if
        some id was not new, or a payload is bytes, which JSON cannot carry."""
        queue, max_attempts, retry, run_at, priority, aging, group = how
        pairs = any(payload is not None or name is not None for _, payload, name in batch)
        try:
            items = json.dumps(batch if pairs else [item[0] for item in batch])
        except TypeError:  # bytes
            return False
        state = "AVAILABLE" if run_at is None else "WAITING"
        params = (queue, items, state, self._counter, max_attempts, run_at,
                  retry.kind, retry.base, retry.cap, self.now, pairs, priority, aging,
                  group)  # fmt: skip
        cur = self._cur
        cur.execute(Q.savepoint_batch)
        added: bool = cur.execute(Q.insert_batch, params).rowcount == len(batch)
        if added:
            self._counter += len(batch)
        else:
            cur.execute(Q.rollback_to_batch)
        cur.execute(Q.release_batch)
        return added

    def claim_many(self, queue: str, n: int, seconds: Number, fair: bool = False) -> list[Claimed]:
        if self.paused is None:
            self._flags()
        if self.paused:
            return []
        if self.groups:  # one at a time: each claim may use up a group's slot or rate
            return claim_each(lambda: self.claim(queue, seconds, fair), n)
        cur, now, base = self._cur, self.now, self._counter
        found = cur.execute(Q.claim_front_many, (queue, n)).fetchall()
        if not found:
            return []
        params = (queue, len(found), base, time_after(now, seconds), now)
        if cur.execute(Q.take_front, params).rowcount != len(found):
            raise InvariantViolation("tasks found AVAILABLE at the front were not all taken")
        self._counter = base + len(found)
        return [(task_id, base + k, attempts, payload, name)
                for k, (_, task_id, attempts, payload, name) in enumerate(found, 1)]  # fmt: skip

    def complete_many(self, queue: str, items: list[Completion]) -> int:
        now = self.now
        if all(result is None for _, _, result in items):
            plain = [(queue, task_id, token or 0, now) for task_id, token, _ in items]
            return int(self._cur.executemany(Q.complete_task, plain).rowcount)
        rows = [(queue, task_id, token or 0, now, result or "") for task_id, token, result in items]
        return int(self._cur.executemany(Q.complete_task_with_result, rows).rowcount)

    def claim(self, queue: str, seconds: Number, fair: bool = False) -> Claimed | None:
        if self.paused is None:
            self._flags()
        if self.paused:
            return None
        cur, now = self._cur, self.now
        if self.groups:
            row = cur.execute(Q.claim_grouped, (queue, now, fair)).fetchone()
        else:
            row = cur.execute(Q.claim_front, (queue,)).fetchone()
        if row is None:
            return None
        row_id, task_id, attempts, payload, name = row
        token = self._counter + 1
        params = (row_id, token, time_after(now, seconds), now)
        if cur.execute(Q.take_task, params).rowcount != 1:
            raise InvariantViolation(f"task {task_id!r} was found AVAILABLE, then not taken")
        self._counter = token
        return task_id, token, attempts, payload, name

    def lease(self, queue: str, task_id: str, token: int | None) -> TaskRow | None:
        """get, checked: the write lock holds the row for the rest of the call."""
        task = self.get(queue, task_id)
        if task is None or task.state is not State.RESERVED:
            return None
        if token is not None and task.token != token:
            return None
        return task if task.deadline is not None and task.deadline > self.now else None

    def complete(
        self, queue: str, task_id: str, token: int | None, result: str | None = None
    ) -> bool:
        if result is None:
            params: tuple[object, ...] = (queue, task_id, token or 0, self.now)
            return bool(self._cur.execute(Q.complete_task, params).rowcount == 1)
        params = (queue, task_id, token or 0, self.now, result)
        return bool(self._cur.execute(Q.complete_task_with_result, params).rowcount == 1)

    def _end_lease(self, task: TaskRow, state: State, params: dict[str, Any]) -> int:
        """Returns the task's new seq (line position or wake-up order)."""
        seq = self._next_id() if state in (State.AVAILABLE, State.WAITING) else task.seq
        params["seq"] = seq
        self._expect_one(Q.end_lease, params, task, "RESERVED under its lease")
        return seq

    def extend(self, queue: str, task_id: str, token: int, seconds: Number) -> bool | None:
        cur, now = self._cur, self.now
        params = (queue, task_id, token, time_after(now, seconds), now)
        if cur.execute(Q.extend_lease, params).rowcount != 1:
            return None
        return bool(cur.execute(Q.stop_asked, (queue, task_id)).fetchone()[0])

    def wake(self, task: TaskRow, order: int, at: Number) -> None:
        params = {
            "id": task.row_id,
            "order": order,
            "seq": self._next_id(),
            "at": at,
            "now": self.now,
        }
        self._expect_one(Q.wake_task, params, task, "WAITING")

    def redrive(self, row_ids: list[int]) -> int:
        moved = 0  # (one writer at a time: the groups need no order)
        for row_id in row_ids:
            params = {"id": row_id, "seq": self._counter + 1, "now": self.now}
            self._cur.execute(Q.remake_group, params)
            if self._cur.execute(Q.redrive_task, params).rowcount == 1:
                self._next_id()
                moved += 1
        return moved

    def dead_ids(self, queue: str, limit: int) -> list[tuple[int, str]]:
        rows = self._cur.execute(Q.dead_ids, {"queue": queue, "limit": limit}).fetchall()
        return [(row_id, task_id) for row_id, task_id in rows]

    def forget_groups(self, queue: str, after: str, batch: int) -> tuple[int, str | None]:
        params = {"queue": queue, "after": after, "batch": batch, "now": self.now}
        last, seen = self._cur.execute(Q.group_span, params).fetchone()
        if not seen:
            return 0, None
        forgotten = int(self._cur.execute(Q.forget_groups, {**params, "last": last}).rowcount)
        return forgotten, last if seen == batch else None

    def _progress(self, params: dict[str, Any]) -> bool:
        params["now"] = self.now
        return bool(self._cur.execute(Q.report_progress, params).rowcount == 1)

    def key_holder(self, queue: str, key: str, cutoff: Number | None) -> Holder | None:
        self._keying()
        row = self._cur.execute(Q.key_holder, (queue, key, cutoff)).fetchone()
        return None if row is None else Holder(row[0], row[1], State(row[2]), row[3])

    def _add_keyed(
        self, how: Adding, task_id: str, payload: Encoded, name: str | None, key: str
    ) -> bool:
        queue, max_attempts, retry, run_at, priority, aging, group = how
        if group is not None:
            self._grouping()
        # (the keys' indexes are there: key_holder, asked first in the call, made them)
        state = "AVAILABLE" if run_at is None else "WAITING"
        row = (queue, task_id, state, self._counter + 1, max_attempts, run_at, payload,
               retry.kind, retry.base, retry.cap, self.now, name, priority, aging, group,
               key)  # fmt: skip
        if self._cur.execute(Q.insert_keyed_task, row).rowcount != 1:
            return False
        self._counter += 1
        return True

    def debounce(self, holder: Holder, payload: Encoded, run_at: Number | None) -> bool:
        stays = run_at is None and holder.state is State.AVAILABLE  # its place in the line
        params = {
            "id": holder.row_id,
            "state": holder.state.value,
            "seen": holder.seq,
            "seq": holder.seq if stays else self._counter + 1,
            "run_at": run_at,
            "payload": payload,
            "now": self.now,
        }
        if self._cur.execute(Q.debounce_task, params).rowcount != 1:
            return False
        if not stays:
            self._counter += 1
        return True

    def _expect_one(self, sql: str, params: dict[str, Any], task: TaskRow, was: str) -> None:
        if self._cur.execute(sql, params).rowcount != 1:
            raise InvariantViolation(f"task {task.task_id!r} was no longer {was}")
