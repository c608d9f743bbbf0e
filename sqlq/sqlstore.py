"""The SQL layer both database backends share: a call names a statement of its
backend's queries.sql, runs it on the call's cursor with its parameters by name,
and maps the rows it returns, the same way on SQLite and on PostgreSQL.

Both DB-API drivers take parameters by name from a dict (``:name`` in SQLite's
queries.sql, ``%(name)s`` in PostgreSQL's), so the parameter style is the
statement's business, never the caller's: every statement this module runs is
given a dict.  What differs between the backends, each supplies:

* ``q``: its named statements (sqlfile.Queries).
* ``stored`` / ``read`` / ``read_or_none``: how a task id or an error text is
  stored and read back (PostgreSQL's text cannot hold NUL, see
  postgresql/text.py; SQLite stores them as they are).
* ``task_row``: a row of the task columns as a TaskRow (PostgreSQL keeps bytes
  payloads in a column of their own).
* On a transaction, ``_cursor`` (the call's cursor, once the call has opened) and
  ``_announce_if`` (PostgreSQL tells listeners of tasks that became AVAILABLE).
* On a backend, ``_read`` (one read outside any transaction, holding the thread
  lock, with its own waiting and error translation) and ``_read_time``.

What stays in each backend is what really differs: connections, locking and
waiting, the hot-path statements (SQLite binds them by position, PostgreSQL
folds the clock into them, see its queries.sql's _call), the on-demand indexes
and triggers of SQLite, the savepoints of PostgreSQL's concurrent writers.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar

from .contract import DEFAULT_AGING, FINISHED, Limit, Number, Outcome, State
from .payload import Encoded
from .records import ScheduleState
from .registry import versioned
from .retry import Retry, stored_policy
from .rows import Figures, TaskRow, WorkerRow, due_of
from .settings import Given, QueueSettings, configure_params, stored_settings

if TYPE_CHECKING:
    from .sqlfile import Queries

T = TypeVar("T")


def _same(text: str) -> str:
    return text


def event_row(row: tuple[Any, ...], read: Callable[[str], str] = _same) -> TaskRow:
    """A row of due_events (both backends: time, order, then the task's columns that
    the due events need) as the TaskRow it is about."""
    (_at, _order, row_id, task_id, state, attempts, max_attempts, token, seq, kind, base, cap,
     stop) = row  # fmt: skip
    return TaskRow(
        row_id, read(task_id), State(state), attempts, max_attempts, token, seq,
        stored_policy(kind, base, cap), stop_requested_at=stop,
    )  # fmt: skip


def in_snapshot(cur: Any, q: Queries, begin: str, read: Callable[..., T], *args: Any) -> T:
    """``read(cur, *args)`` in a read transaction of its own, begun with ``begin`` (one
    of ``q``'s statements): one snapshot, no write lock; rolled back whatever happens."""
    cur.execute(begin)
    try:
        return read(cur, *args)
    finally:
        cur.execute(q.rollback)


#: What an add gives every task it adds (see sqlq.backend.Transaction.insert), in this
#: order: its queue, max_attempts, retry policy, run_at (None: now), priority, aging
#: and group.  A plain tuple, not a NamedTuple: every add makes one, and a NamedTuple's
#: constructor is a Python call of its own (callgrind: about 4,000 instructions an add).
Adding = tuple[str, int, Retry, Number | None, int, float, str | None]


#: An add_many's tasks: (task id, payload, name) each.
Batch = list[tuple[str, Encoded, str | None]]


class Rows:
    """How a backend's statements and rows hold task ids, texts and tasks (see the
    module docstring); each backend's classes say what differs."""

    __slots__ = ()

    q: ClassVar[Queries]

    @staticmethod
    def stored(text: str) -> str:
        """A task id as the database stores it."""
        return text

    @staticmethod
    def read_or_none(text: str | None) -> str | None:
        """A stored error text as it was given."""
        return text

    @staticmethod
    def stored_or_none(text: str | None) -> str | None:
        """An error text as the database stores it."""
        return text

    @staticmethod
    def task_row(row: tuple[Any, ...]) -> TaskRow:
        """A row of the task columns (get_task, list_tasks) as a TaskRow."""
        raise NotImplementedError


class SqlCalls(Rows):
    """The statements of a call (see sqlq.backend.Transaction) that both backends run
    alike; a backend's transaction class inherits them."""

    __slots__ = ()

    now: Any
    _backend: Any

    @property
    def _cursor(self) -> Any:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Commit the call (``_commit``), or undo it and raise (``_fail``); then give up
        what the call holds (``_unlock``)."""
        if exc is not None:
            self._fail(exc)
        try:
            self._commit()
        except BaseException as error:
            self._fail(error)
        self._unlock(committed=True)

    def _commit(self) -> None:
        raise NotImplementedError

    def _fail(self, exc: BaseException) -> NoReturn:
        """Undo the call and raise ``exc``, a driver's error as its sqlq error."""
        raise NotImplementedError

    def _unlock(self, committed: bool = False) -> None:
        raise NotImplementedError

    def _announce_if(self, available: bool) -> None:
        """``available``: a task may have become AVAILABLE (or claimable) by this call."""

    def _figures(self, cur: Any, queue: str) -> Figures:
        raise NotImplementedError

    # --- adds and leases: the port's calls, their statements the backend's ---------

    def insert(
        self,
        queue: str,
        task_id: str,
        max_attempts: int,
        retry: Retry,
        payload: Encoded,
        run_at: Number | None,
        name: str | None,
        key: str | None = None,
        *,
        priority: int = 0,
        aging: float = DEFAULT_AGING,
        group: str | None = None,
    ) -> bool:
        # key not keyword-only: an add without one pays nothing for its default (a
        # keyword-only default not given is a dict lookup at every call)
        how = (queue, max_attempts, retry, run_at, priority, aging, group)
        if key is None:
            return self._add(how, task_id, payload, name)
        return self._add_keyed(how, task_id, payload, name, key)

    def insert_many(
        self,
        queue: str,
        batch: Batch,
        max_attempts: int,
        retry: Retry,
        run_at: Number | None,
        *,
        priority: int = 0,
        aging: float = DEFAULT_AGING,
        group: str | None = None,
    ) -> list[bool]:
        how = (queue, max_attempts, retry, run_at, priority, aging, group)
        return self._add_many(how, batch)

    def _add(self, how: Adding, task_id: str, payload: Encoded, name: str | None) -> bool:
        """insert: whether the task was added (False: its id is taken)."""
        raise NotImplementedError

    def _add_keyed(
        self, how: Adding, task_id: str, payload: Encoded, name: str | None, key: str
    ) -> bool:
        """insert with a key: whether the task was added (False: its id is taken, or the
        key has a holder)."""
        raise NotImplementedError

    def _add_many(self, how: Adding, batch: Batch) -> list[bool]:
        """insert_many: whether each task was added."""
        raise NotImplementedError

    def end_lease(
        self,
        task: TaskRow,
        state: State,
        at: Number,
        error: str | None,
        run_at: Number | None = None,
        attempts_delta: int = 0,
    ) -> int:
        params = {
            "id": task.row_id,
            "token": task.token,
            "state": state.value,
            "run_at": run_at,
            "attempts_delta": attempts_delta,
            "error": self.stored_or_none(error),
            "finished_at": at if state in FINISHED else None,
            "at": at,
            "now": self.now,
        }
        return self._end_lease(task, state, params)

    def _end_lease(self, task: TaskRow, state: State, params: dict[str, Any]) -> int:
        """end_lease's statement with ``params``; the task's new seq."""
        raise NotImplementedError

    def progress(
        self, queue: str, task_id: str, token: int, value: float | None, message: str | None
    ) -> bool:
        params = {
            "queue": queue,
            "task_id": self.stored(task_id),
            "token": token,
            "value": value,
            "message": message,
        }
        return self._progress(params)

    def _progress(self, params: dict[str, Any]) -> bool:
        """progress's statement with ``params``: whether the lease took the report."""
        raise NotImplementedError

    # --- tasks --------------------------------------------------------------------

    def get(self, queue: str, task_id: str) -> TaskRow | None:
        params = {"queue": queue, "task_id": self.stored(task_id)}
        row = self._cursor.execute(self.q.get_task, params).fetchone()
        return None if row is None else self.task_row(row)

    def tasks(self, queue: str, state: State | None, limit: int) -> list[TaskRow]:
        cur = self._cursor
        if state is None:
            cur = cur.execute(self.q.list_tasks, {"queue": queue, "limit": limit})
        else:
            params = {"queue": queue, "state": state.value, "limit": limit}
            cur = cur.execute(self.q.list_tasks_in_state, params)
        return [self.task_row(row) for row in cur.fetchall()]

    def purge(self, queue: str, state: State, cutoff: Number, batch: int) -> int:
        params = {"queue": queue, "state": state.value, "cutoff": cutoff, "batch": batch}
        return int(self._cursor.execute(self.q.purge_batch, params).rowcount)

    def stats(self, queue: str) -> Figures:
        return self._figures(self._cursor, queue)

    def outcome(self, queue: str, task_id: str) -> Outcome | None:
        params = {"queue": queue, "task_id": self.stored(task_id)}
        row = self._cursor.execute(self.q.task_outcome, params).fetchone()
        return None if row is None else (row[0], row[1], self.read_or_none(row[2]))

    # --- cancel and pause ---------------------------------------------------------

    def cancel_unstarted(self, queue: str, task_id: str) -> bool:
        return self._one_task(self.q.cancel_unstarted, queue, task_id)

    def request_stop(self, queue: str, task_id: str) -> bool:
        return self._one_task(self.q.request_stop, queue, task_id)

    def _one_task(self, statement: str, queue: str, task_id: str) -> bool:
        """Whether ``statement`` changed the task, at the call's time."""
        params = {"queue": queue, "task_id": self.stored(task_id), "now": self.now}
        return bool(self._cursor.execute(statement, params).rowcount == 1)

    def set_paused(self, queue: str, paused: bool) -> bool:
        statement = self.q.pause_queue if paused else self.q.resume_queue
        params = {"queue": queue, "now": self.now}
        changed = bool(self._cursor.execute(statement, params).rowcount)
        self._announce_if(changed and not paused)  # idle listeners claim at once
        return changed

    # --- periodic tasks -----------------------------------------------------------

    def schedule(self, queue: str, name: str) -> ScheduleState | None:
        params = {"queue": queue, "name": name}
        row = self._cursor.execute(self.q.get_schedule, params).fetchone()
        return None if row is None else ScheduleState(*row)

    def save_schedule(self, state: ScheduleState, seen: Number | None) -> bool:
        params = {**state._asdict(), "seen": seen}
        statement = self.q.insert_schedule if seen is None else self.q.update_schedule
        return bool(self._cursor.execute(statement, params).rowcount == 1)

    def forget_schedule(self, queue: str, name: str) -> bool:
        params = {"queue": queue, "name": name}
        return bool(self._cursor.execute(self.q.delete_schedule, params).rowcount == 1)

    # --- per-key limits -----------------------------------------------------------

    def set_limit(self, queue: str, group: str, limit: Limit | None) -> bool:
        cur, params = self._cursor, {"queue": queue, "group_key": group}
        if limit is None:
            changed = bool(cur.execute(self.q.remove_limit, params).rowcount)
        else:
            cur.execute(self.q.set_limit, {**params, **limit._asdict()})
            changed = True
        cur.execute(self.q.apply_limits, params)
        self._announce_if(True)  # groups may start tasks they could not before
        return changed

    def limits(self, queue: str) -> dict[str, Limit]:
        rows = self._cursor.execute(self.q.list_limits, {"queue": queue}).fetchall()
        return {group: Limit(*rest) for group, *rest in rows}

    def groups_in_use(self, queue: str) -> dict[str, tuple[int, int]]:
        rows = self._cursor.execute(self.q.list_groups, {"queue": queue}).fetchall()
        return {group: (running, live) for group, running, live in rows}

    # --- the worker registry and the queue's settings -----------------------------

    def beat_worker(self, row: WorkerRow) -> None:
        self._cursor.execute(self.q.beat_worker, versioned(row, self._backend.schema_version))

    def prune_workers(self, before: Number) -> int:
        return int(self._cursor.execute(self.q.prune_workers, {"before": before}).rowcount)

    def forget_worker(self, worker_id: str) -> bool:
        params = {"worker_id": worker_id}
        return bool(self._cursor.execute(self.q.forget_worker, params).rowcount == 1)

    def configure(self, queue: str, given: Given) -> QueueSettings:
        params = configure_params(queue, given, self.now)
        row = self._cursor.execute(self.q.configure_settings, params).fetchone()
        return stored_settings([row])[queue]


class SqlReads(Rows):
    """The reads of a backend (see sqlq.backend.Backend) that both run alike, each
    outside any transaction, in one statement (one snapshot) unless said otherwise,
    through the backend's ``_read``."""

    #: The migration that made sqlq_settings (a queue's stored settings).
    settings_since: ClassVar[int]
    schema_version: int

    def _read(self, attempt: Callable[[Any], T]) -> T:
        raise NotImplementedError

    def _read_time(self, now: Number | None) -> Number | None:
        """The time a read at ``now`` runs at (None: the database's clock, if it has one)."""
        return now

    def _one(self, statement: str, params: dict[str, Any] | None = None) -> Any:
        """The first row of ``statement``, or None."""
        return self._read(lambda cur: cur.execute(statement, params or {}).fetchone())

    def _all(self, statement: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Every row of ``statement``."""
        return self._read(lambda cur: list(cur.execute(statement, params or {}).fetchall()))

    def ready(self, queue: str, now: Number | None) -> bool:
        return bool(self._one(self.q.ready, {"queue": queue, "now": self._read_time(now)})[0])

    def next_due(self, queue: str, now: Number | None) -> tuple[Number, Number | None]:
        return due_of(self._one(self.q.next_due, {"queue": queue, "now": self._read_time(now)}))

    def paused(self, queue: str) -> bool:
        return bool(self._one(self.q.queue_paused, {"queue": queue})[0])

    def settings(self, queue: str | None) -> dict[str, QueueSettings]:
        if self.schema_version < self.settings_since:  # none stored before that migration
            return {}
        if queue is None:
            return stored_settings(self._all(self.q.list_settings))
        row = self._one(self.q.queue_settings, {"queue": queue})
        return {} if row is None else stored_settings([(queue, *row)])

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for queue, state, count in self._all(self.q.count_states):
            out.setdefault(queue, {})[state] = count
        return out

    def schedules(self) -> list[ScheduleState]:
        return [ScheduleState(*row) for row in self._all(self.q.list_schedules)]

    def find(self, queue: str, task_id: str) -> TaskRow | None:
        row = self._one(self.q.get_task, {"queue": queue, "task_id": self.stored(task_id)})
        return None if row is None else self.task_row(row)

    def finished_per_bucket(
        self, queue: str, since: Number, bucket: int
    ) -> list[tuple[Number, str, int]]:
        params = {"queue": queue, "since": since, "bucket": bucket}
        rows = self._all(self.q.finished_per_bucket, params)
        return [(at, state, count) for at, state, count in rows]

    def workers(self) -> tuple[Number, list[WorkerRow]]:
        """(Two statements: the time first, then the rows.)"""

        def read(cur: Any) -> tuple[Number, list[Any]]:
            ((at,),) = cur.execute(self.q.registry_time).fetchall()
            return at, cur.execute(self.q.list_workers).fetchall()

        at, rows = self._read(read)
        return at, [WorkerRow(*row) for row in rows]
