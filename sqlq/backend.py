"""The storage contract: what the durable queue needs from a database, and nothing more.

:class:`sqlq.Queue` holds the queue logic (what happens to a task, and when) and
talks to storage only through the two protocols below.  A backend (SQLite today,
PostgreSQL later) implements them with its own SQL and promises:

* ``Backend.transaction(now)`` runs one call as one serialisable write
  transaction.  The write lock is held from the start; on any exception the
  transaction is rolled back and database errors come out as
  :class:`sqlq.errors.StorageError` subclasses with the driver's exception as
  ``__cause__``.  Nothing of a call is visible to others before it commits.
  Given the caller's own connection in an open transaction, the call runs
  inside it instead (in a savepoint) and commits or rolls back with it.
* The transaction's ``now`` is ``max(now, the database's high-water mark)``; the
  mark is raised to it when the transaction commits.  A backend that keeps time
  (``keeps_time``: a server's clock, one for every machine) takes ``now=None``
  as "the database's clock", and then need not raise the mark.
* A backend may run calls concurrently (PostgreSQL), provided each call sees
  and changes tasks as some serial order of calls would, with two relaxations
  that its documentation states: a claim may pass over tasks that other calls
  hold, and due events may be applied by a later call.  Every change of a lease
  is therefore guarded by the lease running at the call's ``now`` (``lease``,
  ``complete``, ``extend``), not only by its token.
* Updates are guarded by the state the caller saw (compare-and-set); a guard
  that unexpectedly matches nothing raises :class:`sqlq.errors.InvariantViolation`.
* Line positions, wake-up orders and lease tokens come from one counter per
  database that only grows; every move to AVAILABLE or WAITING, and every
  lease, takes the next value.
* The line is ordered by (line key, seq): every move to AVAILABLE sets the
  task's line key to ``rules.line_key(now, priority, aging)``, at the call's
  ``now`` (whatever time the event had), with the priority and aging the task
  was added with.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from .contract import DEFAULT_AGING, Completion, Limit, Number, Outcome, State
from .payload import Encoded
from .records import (
    Checkpoint,
    Compaction,
    QueueOverview,
    ScheduleState,
    SchemaVersions,
    StorageFacts,
)
from .retry import Retry
from .rows import Claimed as Claimed
from .rows import Event as Event
from .rows import Figures as Figures
from .rows import Holder as Holder
from .rows import TaskRow as TaskRow
from .rows import WorkerRow as WorkerRow
from .rows import claim_each as claim_each
from .rows import due_of as due_of
from .settings import Given, QueueSettings

if TYPE_CHECKING:
    import sqlalchemy as sa

    from .browse import Browse, Found


class Transaction(Protocol):
    """One call's view of the database, valid inside ``Backend.transaction``."""

    @property
    def now(self) -> Number:
        """The effective time of the call (never below the database's high-water mark)."""
        ...

    @property
    def mark(self) -> Number:
        """The database's high-water mark of time as the call began."""
        ...

    @property
    def events(self) -> list[Event]:
        """What fell due in the call's queue by ``now``, read as the call began: leases
        with deadline <= now and WAITING tasks with run_at <= now, in event order."""
        ...

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
        """Add a task (of ``group``): AVAILABLE at its place in the line (``priority``'s, see the
        module docstring), or WAITING until ``run_at``.

        False (and no change) if the id exists in the queue.  With ``key`` (a dedupe
        key, see sqlq.keys) the task holds it: False, and no change, also if another
        task holds the key (one added meanwhile by a concurrent call, whose
        transaction this insert waits for).
        """
        ...

    def insert_many(
        self,
        queue: str,
        batch: list[tuple[str, Encoded, str | None]],
        max_attempts: int,
        retry: Retry,
        run_at: Number | None,
        *,
        priority: int = 0,
        aging: float = DEFAULT_AGING,
        group: str | None = None,
    ) -> list[bool]:
        """``insert`` for each (task id, payload, name) in order; an id seen earlier in the
        batch counts as existing."""
        ...

    def claim_many(self, queue: str, n: int, seconds: Number, fair: bool = False) -> list[Claimed]:
        """``claim`` up to ``n`` times, in line order (tokens increasing)."""
        ...

    def complete_many(self, queue: str, items: list[Completion]) -> int:
        """RESERVED -> COMPLETED, storing the result, for each (task id, token, stored
        result) whose lease is current; returns how many completed."""
        ...

    def claim(self, queue: str, seconds: Number, fair: bool = False) -> Claimed | None:
        """Reserve the front AVAILABLE task (the lowest line key, then seq) until
        ``time_after(now, seconds)``, or None.

        A grouped task is a candidate only while its group is below its limits at
        ``now`` (see set_limit); the front of the ungrouped line and the front of the
        first such group compete in line order (the lowest line key, then seq).  The
        first group is the one whose front is first in line, or with ``fair`` the
        one whose latest claim is the oldest (round robin).  The claim counts against
        its group's limits in the same transaction, and every end of the lease frees
        the slot in the transaction that ends it.
        """
        ...

    def get(self, queue: str, task_id: str) -> TaskRow | None:
        """The task, or None."""
        ...

    def lease(self, queue: str, task_id: str, token: int | None) -> TaskRow | None:
        """The task if it is RESERVED (under ``token``, if given) with a lease that
        runs past ``now``, held so that no other call ends that lease before this
        transaction does; None otherwise."""
        ...

    def complete(
        self, queue: str, task_id: str, token: int | None, result: str | None = None
    ) -> bool:
        """RESERVED (under ``token``, if given) with a lease running past ``now`` ->
        COMPLETED with its ``result`` (stored form); False and no change otherwise."""
        ...

    def end_lease(
        self,
        task: TaskRow,
        state: State,
        at: Number,
        error: str | None,
        run_at: Number | None = None,
        attempts_delta: int = 0,
    ) -> int:
        """End ``task``'s lease at time ``at``: AVAILABLE, WAITING until ``run_at``, or DEAD.

        Guarded by the task still being RESERVED under ``task.token``.  Returns the
        task's new seq (its wake-up order when WAITING).
        """
        ...

    def extend(self, queue: str, task_id: str, token: int, seconds: Number) -> bool | None:
        """Move the deadline of the lease ``token`` to ``time_after(now, seconds)``; None
        if it is not the current lease, or no longer runs at ``now``; else whether the
        task was asked to stop."""
        ...

    def wake(self, task: TaskRow, order: int, at: Number) -> None:
        """WAITING -> AVAILABLE (woken at ``at``); guarded by the wake-up ``order``."""
        ...

    def redrive(self, row_ids: list[int]) -> int:
        """DEAD -> AVAILABLE at ``now`` with attempts reset, each task in the order
        given; how many moved (a task whose dedupe key another task holds stays, see
        sqlq.keys).  The tasks' groups, if ``forget_groups`` forgot them, are made
        anew first, with the limits that apply to them (as an add makes them); a
        backend of concurrent writers takes their rows in group-key order, whatever
        the order of the tasks (two redrives of the same groups then never wait for
        each other in a cycle)."""
        ...

    def dead_ids(self, queue: str, limit: int) -> list[tuple[int, str]]:
        """(row id, task id) of DEAD tasks, longest dead first."""
        ...

    def tasks(self, queue: str, state: State | None, limit: int) -> list[TaskRow]:
        """Tasks (of one state, if given) in the order they were added."""
        ...

    def purge(self, queue: str, state: State, cutoff: Number, batch: int) -> int:
        """Delete up to ``batch`` tasks in ``state`` finished at or before ``cutoff``."""
        ...

    def forget_groups(self, queue: str, after: str, batch: int) -> tuple[int, str | None]:
        """Forget the idle groups (see sqlq.contract) among the next ``batch`` groups
        of the queue whose names come after ``after`` (in the database's order of
        names; '' for the first): delete their rows, leaving their limits.  Returns
        how many it forgot and the last name of those ``batch`` groups, or None if
        they were the queue's last.  No call waits for it: a group whose row another
        call holds is not idle, or soon not (it is skipped)."""
        ...

    def stats(self, queue: str) -> Figures:
        """(counts per state, front of line available since, next deadline, next run_at,
        paused)."""
        ...

    # --- cancel and pause (see sqlq.contract) ---------------------------------------------

    def cancel_unstarted(self, queue: str, task_id: str) -> bool:
        """AVAILABLE or WAITING -> CANCELLED at ``now``; False and no change otherwise."""
        ...

    def request_stop(self, queue: str, task_id: str) -> bool:
        """Record at ``now`` that the task is asked to stop (a request already recorded
        keeps its time), if it is RESERVED with a lease running past ``now``; False and
        no change otherwise."""
        ...

    def set_paused(self, queue: str, paused: bool) -> bool:
        """Pause the queue (claims then find nothing) or resume it; False if it was so
        already."""
        ...

    # --- periodic tasks (sqlq.schedule) -----------------------------------------------

    def schedule(self, queue: str, name: str) -> ScheduleState | None:
        """The schedule ``name`` of ``queue`` as stored, or None if it is not."""
        ...

    def save_schedule(self, state: ScheduleState, seen: Number | None) -> bool:
        """Store ``state`` (its queue and name say which schedule) if the stored
        ``handled_until`` is still ``seen`` (None: if the schedule is not stored
        yet): a compare-and-set.  False, and no change, otherwise."""
        ...

    def forget_schedule(self, queue: str, name: str) -> bool:
        """Delete the stored schedule ``name`` of ``queue``; False if none was stored."""
        ...

    def outcome(self, queue: str, task_id: str) -> Outcome | None:
        """(state, stored result, last error) of the task, or None: what ``result``
        reads, without the payload."""
        ...

    def progress(
        self, queue: str, task_id: str, token: int, value: float | None, message: str | None
    ) -> bool:
        """Store a progress report if ``token`` is the task's current lease and it still
        runs at ``now`` (as ``extend`` guards); False and no change otherwise."""
        ...

    # --- dedupe keys (sqlq.keys) -------------------------------------------------------

    def key_holder(self, queue: str, key: str, cutoff: Number | None) -> Holder | None:
        """The task of ``queue`` that holds ``key``: the one not finished with it, else
        (if ``cutoff`` is not None) the one that finished with it latest, if after
        ``cutoff``; None if there is none.  Two probes of indexes, never a scan."""
        ...

    def debounce(self, holder: Holder, payload: Encoded, run_at: Number | None) -> bool:
        """The holder (WAITING or AVAILABLE) takes ``payload`` and runs at ``run_at``:
        WAITING until then, or None: AVAILABLE, keeping its place in the line if it
        was AVAILABLE, else at the back.  A compare-and-set on the holder's state
        and seq as found: False, and no change, if it moved meanwhile."""
        ...

    # --- per-key limits (see Queue.set_limit) -------------------------------------------

    def set_limit(self, queue: str, group: str, limit: Limit | None) -> bool:
        """Store the limits of ``group`` ('' for the queue's default), or remove them
        (``limit`` None), and apply them to the groups they concern; False if there
        was nothing to remove."""
        ...

    def limits(self, queue: str) -> dict[str, Limit]:
        """The limits stored for the queue, by group ('' for the default)."""
        ...

    def groups_in_use(self, queue: str) -> dict[str, tuple[int, int]]:
        """(leases, unfinished tasks) of each group with unfinished tasks."""
        ...

    # --- the worker registry (see sqlq.registry) ------------------------------------------

    def beat_worker(self, row: WorkerRow) -> None:
        """Store the worker's row, replacing the one of the same worker id but for its
        ``started_at``, which stays that of its first write."""
        ...

    def prune_workers(self, before: Number) -> int:
        """Delete the rows (of every queue) whose ``stale_at`` is before ``before``;
        returns how many."""
        ...

    def forget_worker(self, worker_id: str) -> bool:
        """Delete the worker's row; False if there was none."""
        ...

    # --- a queue's settings (see sqlq.settings) --------------------------------------------

    def configure(self, queue: str, given: Given) -> QueueSettings:
        """Store the settings ``given`` (checked; None: not given) for the queue, at the call's
        time, keeping the stored ones not given (or the defaults, if none are stored), in
        one statement: two configures at once of different settings both stay.  Returns
        the settings now stored."""
        ...


#: Called by a transaction once it has read the clock, with the time the call asked
#: for, if something fell due or that time was behind the mark (see Backend.transaction).
Opened = Callable[[Transaction, Number], None]


class Backend(Protocol):
    """A database holding any number of named queues.

    sqlq.backends opens one from a path or URL; the options a Queue does not take
    itself are the backend's, which validates them.
    """

    @property
    def name(self) -> str:
        """What messages and logs call the database (a file's path; never a password)."""
        ...

    @property
    def keeps_time(self) -> bool:
        """True: the database has a clock of its own (a server's), which calls given
        ``now=None`` use; False: the caller always gives the time."""
        ...

    @property
    def engine(self) -> sa.Engine:
        """A SQLAlchemy engine on the database, whose connections (in an open
        transaction) ``transaction`` accepts as ``external``."""
        ...

    def transaction(
        self,
        now: Number | None,
        queue: str,
        external: Any,
        opened: Opened,
        one_write: bool = False,
    ) -> AbstractContextManager[Transaction]:
        """One call on ``queue``: a write transaction at ``now`` (see the module docstring).

        ``one_write``: the call makes at most one change, in one statement after
        which nothing of the call can raise (an add, a completion, a heartbeat; it may
        read more, before, or after a write that changed nothing).  When nothing is
        due, a backend may then run the call's statements each as a transaction of
        its own (PostgreSQL: no BEGIN and COMMIT round trips).

        ``opened(tx, now)`` runs inside it right after the clock and the due events
        were read, when something fell due (``tx.events``) or ``now`` was behind the
        mark; what it raises rolls the call back.  ``external``: the caller's
        connection, or None.
        """
        ...

    def ready(self, queue: str, now: Number | None) -> bool:
        """Read only: would a claim at ``now`` (None: the database's clock) find a
        task?  Takes no write lock."""
        ...

    def next_due(self, queue: str, now: Number | None) -> tuple[Number, Number | None]:
        """Read only, as ``ready``: (the time of the read, by the rule ready uses, and
        the earliest time at which the queue has a task due that a claim does not find
        before then: the next rate slot of a group that may start one, the next lease
        to run out, the next WAITING task's run_at; None if the queue is paused or
        holds nothing back by time).  Takes no write lock."""
        ...

    def counts(self) -> dict[str, dict[str, int]]:
        """Tasks per state, per queue name."""
        ...

    def snapshot(self, queue: str) -> Figures:
        """Read only, in one snapshot and without the write lock: what
        Transaction.stats gives, as last written (nothing due is applied)."""
        ...

    def storage_facts(self) -> StorageFacts:
        """What the storage looks like now, for stats (what the backend can tell)."""
        ...

    def checkpoint(self) -> Checkpoint:
        """Maintenance: make what was committed part of the database's main storage now,
        as far as no reader needs the old state; errors are raised."""
        ...

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls for a lock, those in progress
        included, ``after`` seconds from now at the latest (the call raises Busy);
        None: waits last as configured again.  Thread-safe and safe in a signal
        handler."""
        ...

    def subscribe(self, queue: str, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback()`` (in a thread of the backend's) when a task becomes
        AVAILABLE in ``queue`` by a commit anywhere; returns the function that
        cancels this, or None if the backend announces nothing (callers poll)."""
        ...

    def clock_reference(self) -> float | None:
        """The time (Unix seconds) by a clock that a process's faked or broken clock
        does not affect, to check readings of the system clock against; None if
        the backend cannot tell (the reading is then trusted)."""
        ...

    def close(self) -> None:
        """Release the connection(s).  Calls after close raise QueueClosed."""
        ...

    def paused(self, queue: str) -> bool:
        """Read only, without the write lock: is the queue paused?"""
        ...

    def settings(self, queue: str | None) -> dict[str, QueueSettings]:
        """Read only, without the write lock: the stored settings of ``queue`` (None:
        of every queue), by queue; a queue without any is missing."""
        ...

    # --- inspection and maintenance (sqlq's commands) -----------------------------------
    #
    # sqlq's commands open a backend for these with open_backend(url, migrate=False), an
    # option every backend takes: nothing is created, migrated or changed, and the
    # database must exist and be a sqlq database of a schema version this sqlq knows (an
    # older one included: schema_versions says so, and the caller decides; the queue
    # calls above need the current version).

    def describe(self) -> str:
        """The database software in use and its version, for people (stats, the demo):
        'SQLite 3.53.4 (pysqlite3)'."""
        ...

    def schema_versions(self) -> SchemaVersions:
        """The schema version found on opening, the one now, and the latest known."""
        ...

    def overview(self, with_names: bool) -> dict[str, QueueOverview]:
        """Every queue that has tasks, by name: read only, in one snapshot and without
        the write lock, as last written (nothing due is applied).  ``with_names``: the
        named tasks per name and state too (may read every task)."""
        ...

    def compact(self) -> Compaction:
        """Maintenance: give the space of deleted tasks back to the operating system.
        May hold the write lock while it runs (other calls wait)."""
        ...

    def backup(self, dest: str) -> int:
        """Copy the database as it is at one moment, while others go on using it, to
        the file ``dest`` (a path), replaced only once the copy is whole and only if it
        is a sqlq database that no queue has open; returns the copy's size in bytes.
        InvalidConfig, naming the alternative, from a backend that keeps no database
        in a file."""
        ...

    def schedules(self) -> list[ScheduleState]:
        """Every schedule the database keeps, by queue and name: read only, without
        the write lock."""
        ...

    # --- the dashboard (sqlq.web): reads only, without the write lock --------------------

    def browse(self, where: Browse) -> list[Found]:
        """A keyset page of the tasks of every queue that match ``where`` (see
        sqlq.browse): read only, without the write lock, as last written."""
        ...

    def find(self, queue: str, task_id: str) -> TaskRow | None:
        """The task as last written, or None: read only, without the write lock."""
        ...

    def finished_per_bucket(
        self, queue: str, since: Number, bucket: int
    ) -> list[tuple[Number, str, int]]:
        """(start of a ``bucket``-second span, state, how many tasks of ``queue`` finished
        in that state then) since ``since``, in time order: read only, without the
        write lock."""
        ...

    def workers(self) -> tuple[Number, list[WorkerRow]]:
        """The database's time (the queue's mark, or its clock if later: the time by
        which a reader judges the rows stale, never the reader's own clock) and every
        row of the worker registry (of every queue), as last written: read only,
        without the write lock."""
        ...
