"""Queue: the lease queue of sqlq.contract, durable in a database shared by processes.

Each call is one write transaction on the backend: first everything due in the
queue happens (leases run out, WAITING tasks wake up, in the order they fell
due), then the call does its work.  The logic here decides what happens to a
task; the backend only stores it (see sqlq.backend for that contract).
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import random
import socket
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

from . import payload as payloads
from .backend import Backend, Claimed, Event, Figures, TaskRow, Transaction, WorkerRow
from .backends import open_backend
from .contract import (
    DEFAULT_AGING,
    FINISHED,
    LEASE_EXPIRED,
    MAX_LEASE_SECONDS,
    MAX_LIMIT,
    NO_PRIORITY,
    NO_START,
    Cancel,
    Completion,
    Limit,
    Number,
    Outcome,
    State,
    check_aging,
    check_batch,
    check_count,
    check_error,
    check_failures,
    check_flag,
    check_group,
    check_leases,
    check_limit,
    check_max_attempts,
    check_name,
    check_new_task_id,
    check_priority,
    check_progress,
    check_queue_name,
    check_result,
    check_retry,
    check_rng,
    check_seconds,
    check_start,
    check_states,
    check_task_id,
    check_task_ids,
    check_task_name,
    check_time,
    check_token,
    first_run,
    limit_key,
    result_of,
    time_after,
    undecodable_error,
)
from .errors import ClockSkew, InvalidArgument, InvalidConfig, InvalidPayload, SchemaError
from .keys import Added, Keyed, KeyRule, check_key, on_holder
from .records import (
    Checkpoint,
    GroupUse,
    Heartbeat,
    Lease,
    Purged,
    QueueStats,
    ScheduleState,
    TaskInfo,
    WorkerInfo,
)
from .registry import KEEP_STALE, STALE_BEATS, held_json, listed
from .results import DEFAULT_POLL, ResultWait, wait
from .retry import Retry
from .rules import key_cutoff, lease_end, released, runs_before
from .schedule import Schedule, Ticked, check_schedule, encoded_tasks, plan
from .settings import DEFAULTS, QueueSettings, merged

if TYPE_CHECKING:  # the backend loads SQLAlchemy when a Queue opens its database
    import sqlalchemy as sa

#: Tasks deleted per transaction by ``purge``, so that no call holds the write lock long.
PURGE_BATCH = 1000

#: How far (seconds) a reading of the system clock may run ahead of the kernel's clock
#: (and how far readings advance between two checks against it).
DEFAULT_MAX_CLOCK_STEP = 60.0

#: At most one warning per this many seconds about a clock behind the queue's time.
LAG_WARNING_EVERY = 60.0

log = logging.getLogger("sqlq")


class Queue:
    """A named queue in a SQLite file or a PostgreSQL database, safe for many
    processes and threads.

    ``now`` is optional in every call and defaults to ``clock()`` (Unix time;
    on PostgreSQL, with the default clock, the server's time).  Processes'
    clocks disagree a little, so the database keeps a high-water mark of time:
    a call whose ``now`` is below it is handled at the mark.

    Readings of the system clock (``now`` not given) are checked against the
    kernel's clock about once per ``max_clock_step`` seconds of clock advance:
    a reading more than that ahead of the kernel's time (a faked or broken
    clock) makes the call raise :class:`sqlq.errors.ClockSkew` and change
    nothing.  So one process with a wrong clock can expire leases at
    most ``max_clock_step`` early.  A ``now`` passed in, or a custom ``clock``,
    is trusted as given (that is the injectable clock of tests and replays).

    ``max_attempts``, ``retry`` and ``aging`` (seconds of waiting one step of
    priority is worth, DEFAULT_AGING; None for strict priorities: see
    sqlq.contract) are stored with each task when it is added; ``lease_seconds``
    applies to the leases this object hands out.  ``lease_seconds``,
    ``max_attempts`` and ``retry`` not given (None) are the queue's stored
    settings, read once when it is opened (see ``configure`` and sqlq.settings);
    one given applies to this object alone.

    ``path_or_url`` chooses the backend (see sqlq.backends); the other keyword
    options are the backend's: for SQLite ``synchronous`` ("full" or "normal"),
    ``busy_timeout`` (seconds a call may wait for the write lock, 30 by default)
    and ``file_mode`` (of a new database file, 0o600 by default); for
    PostgreSQL ``synchronous``, ``busy_timeout`` (for any lock), ``strict`` and
    ``listen`` (see sqlq.postgresql.backend).

    ``fair``: this object's claims take grouped tasks round robin between the
    groups (the group served longest ago first) instead of in line order; see
    ``set_limit``.
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike[str],
        *,
        lease_seconds: Number | None = None,
        max_attempts: int | None = None,
        queue: str = "default",
        retry: Retry | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
        max_clock_step: float | None = DEFAULT_MAX_CLOCK_STEP,
        aging: float | None = DEFAULT_AGING,
        fair: bool = False,
        **options: Any,
    ) -> None:
        # The settings given (None: the queue's stored one, read once opened), checked
        # before anything is opened.
        merged(DEFAULTS, lease_seconds, max_attempts, retry)
        self._explicit = (lease_seconds, max_attempts, retry)
        self.aging = check_aging(aging)
        self.fair = check_flag(fair, "fair")
        if max_clock_step is not None and (
            isinstance(max_clock_step, bool)
            or not isinstance(max_clock_step, int | float)
            or not 0 < max_clock_step <= MAX_LEASE_SECONDS
        ):
            raise InvalidConfig(
                f"max_clock_step must be a number of seconds in (0, {MAX_LEASE_SECONDS:g}], "
                f"or None to trust the clock; got {max_clock_step!r}"
            )
        self.max_clock_step = max_clock_step
        self._step = math.inf if max_clock_step is None else float(max_clock_step)
        # Only the system clock is checked against the kernel's.
        self._guard_clock = max_clock_step is not None and clock is time.time
        self._kernel_seen = -math.inf  # the kernel's time at this process's last check
        self._lag_warned = -LAG_WARNING_EVERY
        self.queue = check_queue_name(queue)
        self.max_payload_bytes = payloads.check_limit(max_payload_bytes)
        if not callable(clock):
            raise InvalidConfig(f"clock must be a function giving the time, not {clock!r}")
        self._clock = clock
        self._rng = check_rng(rng)
        self._backend: Backend = open_backend(path_or_url, **options)
        versions = self._backend.schema_versions()
        if versions.current < versions.latest:  # opened with migrate=False, as it is
            self._backend.close()
            raise SchemaError(
                f"{self._backend.name}: the database is at schema version {versions.current}, "
                f"older than this sqlq's {versions.latest}; a Queue needs the current one "
                "(open it without migrate=False to migrate it)"
            )
        if None in self._explicit:
            try:
                stored = self._backend.settings(self.queue).get(self.queue, DEFAULTS)
            except BaseException:
                self._backend.close()
                raise
        else:
            stored = DEFAULTS  # not read: every setting was given
        self._use(stored)
        # Calls without a time take the database's clock, when it keeps one and the
        # caller did not give a clock of their own.
        self._server_time = clock is time.time and self._backend.keeps_time

    def _use(self, stored: QueueSettings) -> None:
        """This handle's settings: those given to it, else ``stored``."""
        lease, attempts, retry = self._explicit
        self.lease_seconds, self.max_attempts, self.retry = merged(stored, lease, attempts, retry)

    def configure(
        self,
        *,
        lease_seconds: Number | None = None,
        max_attempts: int | None = None,
        retry: Retry | None = None,
        now: Number | None = None,
    ) -> QueueSettings:
        """Store the queue's settings for every process that opens it without them (see
        sqlq.settings): those given replace the stored ones (or the defaults), the
        others stay; returns the settings now stored.  This handle uses them too, but
        for the settings it was opened with.  Processes that have the queue open keep
        theirs until they open it again.  Tasks already added keep their attempts and
        retry policy."""
        with self._call(now) as tx:
            new = tx.configure(self.queue, (lease_seconds, max_attempts, retry))
        self._use(new)
        return new

    def settings(self) -> QueueSettings | None:
        """The queue's stored settings as the database holds them now, or None if none
        were stored (processes then use sqlq.settings.DEFAULTS): read only.  This
        handle's own are its ``lease_seconds``, ``max_attempts`` and ``retry``."""
        return self._backend.settings(self.queue).get(self.queue)

    @property
    def engine(self) -> sa.Engine:
        """A SQLAlchemy engine on the queue's database, for transactional ``add``/``complete``.

        On SQLite its transactions start with ``BEGIN IMMEDIATE`` and it uses the same
        SQLite library as the queue.  Use it for your own tables in the same database.
        """
        return self._backend.engine

    # --- the core contract --------------------------------------------------------

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
            elif tx.insert_keyed(self.queue, task_id, rule.key, limit, policy, encoded,
                                 waiting, name, priority=priority,
                                 aging=self.aging, group=group):  # fmt: skip
                return Added(Keyed.ADDED, task_id)
            elif tx.get(self.queue, task_id) is not None:
                return Added(Keyed.EXISTS, None)

    def reserve(self, now: Number | None = None) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available.

        Only the id is handed out: the payload is not read (nor decoded).
        """
        with self._call(now) as tx:
            claimed = tx.claim(self.queue, self.lease_seconds, self.fair)
            return None if claimed is None else claimed[0]

    def complete(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        token: int | None = None,
        conn: sa.Connection | None = None,
        result: Any = None,
    ) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now.

        With ``token``, only that lease may complete the task; asked again with
        the token of the lease that completed it, the answer is True again (so a
        retry after an unknown outcome is safe; the first ``result`` stays).  With
        ``conn``, the completion commits or rolls back with the caller's
        transaction.  ``result`` (a JSON value) is stored with the task: see
        ``result``.
        """
        task_id = check_task_id(task_id)
        token = None if token is None else check_token(token)
        stored = None if result is None else check_result(result, self.max_payload_bytes)
        with self._call(now, conn, one_write=True) as tx:
            if tx.complete(self.queue, task_id, token, stored):
                return True
            return token is not None and self._completed_by(tx, task_id, token)

    def _completed_by(self, tx: Transaction, task_id: str, token: int) -> bool:
        """Did the lease ``token`` complete the task (a retried complete)?"""
        task = tx.get(self.queue, task_id)
        return task is not None and task.state is State.COMPLETED and task.token == token

    def complete_and_claim(
        self, task_id: str, now: Number | None = None, *, token: int, result: Any = None
    ) -> tuple[bool, Lease | None]:
        """``complete(task_id, token=token, result=result)`` and ``claim()`` in one
        transaction.

        A worker that finishes a task and wants the next pays for one commit
        instead of two (one fsync per task under ``synchronous="full"``).  Returns
        what ``complete`` would and the new lease (claimed either way).
        """
        task_id = check_task_id(task_id)
        token = check_token(token)
        stored = None if result is None else check_result(result, self.max_payload_bytes)
        with self._call(now) as tx:
            done = tx.complete(self.queue, task_id, token, stored) or self._completed_by(
                tx, task_id, token
            )
            return done, self._claim(tx)

    def fail(
        self,
        task_id: str,
        now: Number | None = None,
        *,
        token: int | None = None,
        error: object = None,
        retry: bool = True,
    ) -> str | None:
        """Fail a RESERVED task: AVAILABLE again, WAITING for a retry delay, or DEAD.

        None if the task is not RESERVED (or, with ``token``, not under that lease).
        ``error`` (a str or an exception) is recorded as the task's last error.
        With ``retry=False`` the task goes DEAD at once, its attempts all used
        (a failure no retry can mend).
        """
        task_id = check_task_id(task_id)
        token = None if token is None else check_token(token)
        text = check_error(error)
        retry = check_flag(retry, "retry")
        with self._call(now) as tx:
            return self._fail(tx, task_id, token, text, retry)

    def _fail(
        self, tx: Transaction, task_id: str, token: int | None, text: str | None, retry: bool
    ) -> str | None:
        task = tx.lease(self.queue, task_id, token)
        if task is None:
            return None
        if not retry and task.stop_requested_at is None:
            _kill(tx, task, text)
            return State.DEAD.value
        return self._end_lease(tx, task, tx.now, text)[0].value

    def status(self, task_id: str, now: Number | None = None) -> str | None:
        """The task's state after due events, or None for an unknown id."""
        task_id = check_task_id(task_id)
        with self._call(now, one_write=True) as tx:
            task = tx.get(self.queue, task_id)
            return None if task is None else task.state.value

    # --- leases -------------------------------------------------------------------

    def claim(self, now: Number | None = None) -> Lease | None:
        """Like ``reserve``, but returns the whole lease: token, attempt, deadline, payload."""
        with self._call(now) as tx:
            return self._claim(tx)

    def extend(
        self,
        task_id: str,
        token: int,
        now: Number | None = None,
        *,
        seconds: Number | None = None,
    ) -> Number | None:
        """Heartbeat: the lease now ends at ``now + seconds`` (default lease_seconds).

        Returns the new deadline, or None if ``token`` is not the task's current
        lease (it ran out, ended, or another worker holds the task now).
        """
        beat = self.heartbeat(task_id, token, now, seconds=seconds)
        return None if beat is None else beat.deadline

    def heartbeat(
        self,
        task_id: str,
        token: int,
        now: Number | None = None,
        *,
        seconds: Number | None = None,
    ) -> Heartbeat | None:
        """``extend``, answering also whether the task was asked to stop (``cancel``):
        what a Worker's heartbeats call."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        length = self.lease_seconds if seconds is None else check_seconds(seconds, "seconds")
        with self._call(now, one_write=True) as tx:
            stop = tx.extend(self.queue, task_id, token, length)
            return None if stop is None else Heartbeat(time_after(tx.now, length), stop)

    def release(self, task_id: str, token: int, now: Number | None = None) -> bool:
        """Give a lease back without counting its attempt: the task goes to the back of the line."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        with self._call(now) as tx:
            task = tx.lease(self.queue, task_id, token)
            if task is None:
                return False
            state = released(task.stop_requested_at is not None)
            delta = -1 if state is State.AVAILABLE else 0  # an attempt given back is not counted
            tx.end_lease(task, state, tx.now, task.last_error, attempts_delta=delta)
            return True

    # --- cancel and pause (see sqlq.contract) ---------------------------------------

    def cancel(self, task_id: str, now: Number | None = None) -> Cancel | None:
        """Cancel a task: one not started (AVAILABLE or WAITING) is CANCELLED at once
        (``Cancel.CANCELLED``); a running one (RESERVED) is asked to stop
        (``Cancel.STOPPING``): its worker learns it at its next heartbeat, and the
        task ends CANCELLED unless the worker completes it.  None, and no change, for
        anything else (an unknown id, a finished task)."""
        task_id = check_task_id(task_id)
        with self._call(now) as tx:
            if tx.cancel_unstarted(self.queue, task_id):
                return Cancel.CANCELLED
            return Cancel.STOPPING if tx.request_stop(self.queue, task_id) else None

    def pause(self, now: Number | None = None) -> bool:
        """Hand out no leases (in any process) until ``resume``: claims find nothing
        and ``ready`` says False; adds, and the leases already out, work as before.
        False if the queue was paused already."""
        with self._call(now) as tx:
            return tx.set_paused(self.queue, True)

    def resume(self, now: Number | None = None) -> bool:
        """Hand out leases again (announced to idle workers where the database announces
        new tasks); False if the queue was not paused."""
        with self._call(now) as tx:  # not one write: the announcement is a statement too
            return tx.set_paused(self.queue, False)

    @property
    def paused(self) -> bool:
        """Is the queue paused (by any process)?"""
        return self._backend.paused(self.queue)

    # --- batches --------------------------------------------------------------------

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

    def claim_many(self, n: int, now: Number | None = None) -> list[Lease]:
        """Up to ``n`` leases from the front of the line, in one transaction."""
        n = check_count(n, "n")
        with self._call(now) as tx:
            return self._claim_many(tx, n)

    def _claim_many(self, tx: Transaction, n: int) -> list[Lease]:
        leases: list[Lease] = []
        while True:  # more than once only to replace tasks dead-lettered on the way
            wanted = n - len(leases)
            claimed = tx.claim_many(self.queue, wanted, self.lease_seconds, self.fair)
            deadline = time_after(tx.now, self.lease_seconds)  # (known once it claimed)
            leases.extend(filter(None, (self._lease(tx, c, deadline) for c in claimed)))
            if len(claimed) < wanted or len(leases) == n:
                return leases

    def complete_many(
        self,
        leases: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]],
        now: Number | None = None,
    ) -> list[bool]:
        """``complete(task_id, token=token)`` for each lease (or (id, token) pair, or
        (id, token, result) triple), in one transaction; the answers in the same
        order."""
        items = check_leases(leases, self.max_payload_bytes)
        with self._call(now) as tx:
            return self._complete_many(tx, items)

    def _complete_many(self, tx: Transaction, items: list[Completion]) -> list[bool]:
        if not items or tx.complete_many(self.queue, items) == len(items):
            return [True] * len(items)
        # Some were not completed now: each is done if its lease completed it, now
        # or in an earlier call (a retry); one item completes one row at most.
        return [self._completed_by(tx, task_id, token) for task_id, token, _ in items]

    def settle_and_claim(
        self,
        n: int,
        now: Number | None = None,
        *,
        completed: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]] = (),
        failed: Iterable[tuple[str, int, object] | tuple[str, int, object, bool]] = (),
    ) -> tuple[list[bool], list[str | None], list[Lease]]:
        """Report the outcomes of finished leases and claim up to ``n`` (0 to MAX_BATCH)
        new ones, in one transaction: one commit for a worker's every outcome and
        its next tasks.

        ``completed`` holds Leases, (task id, token) pairs or (task id, token,
        result) triples, each answered as ``complete(task_id, token=token,
        result=result)`` would (a retry answers True again);
        ``failed`` holds (task id, token, error) triples or (task id, token, error,
        retry) quadruples, each answered as ``fail`` would.  The completions happen
        first, then the failures, then the claim, which may thus take a task failed
        just before.  Returns both lists of answers, in the order given, and the new
        leases.
        """
        n = check_count(n, "n", least=0)
        done_items = check_leases(completed, self.max_payload_bytes, "completed")
        fail_items = check_failures(failed)
        with self._call(now) as tx:
            done = self._complete_many(tx, done_items)
            states = [self._fail(tx, *item) for item in fail_items]
            return done, states, self._claim_many(tx, n) if n else []

    # --- results and progress (see contract.check_result) ---------------------------

    def result(self, task_id: str, now: Number | None = None) -> Any:
        """The result stored with a COMPLETED task (None if it was completed without
        one).  NoResult if the id is unknown or the task is not COMPLETED; TaskDead
        (a NoResult with the last error) if it is DEAD."""
        task_id = check_task_id(task_id)
        return result_of(task_id, self._outcome(task_id, now))

    def wait_for_result(
        self,
        task_id: str,
        timeout: Number,
        *,
        poll: Number = DEFAULT_POLL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> Any:
        """Block until the task is COMPLETED (its result) or DEAD (TaskDead), or
        ``timeout`` seconds have passed (ResultTimeout); looks with pauses that
        double up to ``poll`` seconds (see sqlq.results)."""
        return wait(ResultWait(task_id, timeout, poll, clock), self._outcome, sleep)

    def _outcome(self, task_id: str, now: Number | None = None) -> Outcome | None:
        """(state, stored result, last error) of the task after due events, or None."""
        with self._call(now, one_write=True) as tx:
            return tx.outcome(self.queue, task_id)

    def progress(
        self,
        task_id: str,
        token: int,
        value: Number | None = None,
        message: str | None = None,
        *,
        now: Number | None = None,
    ) -> bool:
        """Report the progress of a running task: a number (on a scale of the
        handler's own) and/or a message, shown by ``info``, ``sqlq show`` and
        ``sqlq list``.  False, and no change, if ``token`` is not the task's current
        lease (as ``extend``)."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        number, text = check_progress(value, message)
        with self._call(now, one_write=True) as tx:
            return tx.progress(self.queue, task_id, token, number, text)

    # --- per-key limits (see contract.check_limit) ----------------------------------

    def set_limit(
        self,
        group: str | None,
        now: Number | None = None,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: Number | None = None,
    ) -> None:
        """Limit the tasks of ``group`` (None: every group without limits of its own,
        the queue's default), for every process: at most ``concurrency`` leases at
        once (a lease counts until it is completed, failed, released, cancelled or
        runs out), and at most ``rate`` starts (claims) per ``per`` seconds (1 if not
        given), spaced ``per / rate`` seconds apart.  None: no such limit.  The
        limits replace those the group had; claims pass over a group at its limits.
        Ungrouped tasks have no limits."""
        key = limit_key(group)
        limit = check_limit(concurrency, rate, per)
        with self._call(now) as tx:
            tx.set_limit(self.queue, key, limit)

    def remove_limit(self, group: str | None, now: Number | None = None) -> bool:
        """Forget the limits set for ``group`` (None: the default): it obeys the
        queue's default again (or, for the default, groups without limits of their
        own are unlimited).  False if none were set."""
        key = limit_key(group)
        with self._call(now) as tx:
            return tx.set_limit(self.queue, key, None)

    def limits(self, now: Number | None = None) -> dict[str | None, Limit]:
        """The limits set, by group (None: the default)."""
        with self._call(now) as tx:
            return {group or None: limit for group, limit in tx.limits(self.queue).items()}

    def groups(self, now: Number | None = None) -> dict[str, GroupUse]:
        """Each group with unfinished tasks: its leases now and its unfinished tasks."""
        with self._call(now) as tx:
            return {g: GroupUse(*use) for g, use in tx.groups_in_use(self.queue).items()}

    # --- dead letters, retention, inspection ---------------------------------------

    def info(self, task_id: str, now: Number | None = None) -> TaskInfo | None:
        """Everything stored about a task, or None."""
        task_id = check_task_id(task_id)
        with self._call(now, one_write=True) as tx:
            task = tx.get(self.queue, task_id)
            return None if task is None else _info(task)

    def tasks(
        self, now: Number | None = None, *, state: str | None = None, limit: int = 100
    ) -> list[TaskInfo]:
        """Up to ``limit`` tasks (of one state, if given), in the order they were added."""
        wanted = None if state is None else check_states(state, tuple(State))[0]
        limit = check_count(limit, "limit")
        with self._call(now) as tx:
            return [_info(task) for task in tx.tasks(self.queue, wanted, limit)]

    def dead(self, now: Number | None = None, *, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` DEAD tasks, the longest dead first."""
        limit = check_count(limit, "limit")
        with self._call(now) as tx:
            found = (tx.get(self.queue, task_id) for _, task_id in tx.dead_ids(self.queue, limit))
            return [_info(task) for task in found if task is not None]

    def redrive(self, now: Number | None = None, task_ids: Iterable[str] | None = None) -> int:
        """Send DEAD tasks (the given ones, or all) back to the line with attempts reset.

        Returns how many were redriven; ids that are not DEAD are skipped.  Each
        call is one transaction; redriving all takes every DEAD task at once.
        """
        ids = check_task_ids(task_ids)
        with self._call(now) as tx:
            if ids is None:
                rows = [row_id for row_id, _ in tx.dead_ids(self.queue, -1)]
            else:
                found = (tx.get(self.queue, task_id) for task_id in ids)
                rows = [t.row_id for t in found if t is not None and t.state is State.DEAD]
            return tx.redrive(rows) if rows else 0

    def purge(
        self,
        now: Number | None = None,
        *,
        states: Iterable[str] = ("COMPLETED",),
        older_than: Number = 0,
        batch_size: int = PURGE_BATCH,
    ) -> Purged:
        """Forget COMPLETED (and/or DEAD, CANCELLED) tasks finished at least
        ``older_than`` seconds ago, then the idle groups (see sqlq.contract, Per-key
        limits: a group without unfinished tasks whose rate owes it no wait; its
        limits stay).

        Deletes in transactions of at most ``batch_size`` tasks (and looks at most
        at ``batch_size`` groups in each), so that workers are never held up for
        long.  Returns how many tasks were removed (their ids can be added again),
        an int whose ``groups`` says how many groups were forgotten.
        """
        chosen = check_states(states, FINISHED)
        age = check_seconds(older_than, "older_than")
        batch = check_count(batch_size, "batch_size")
        removed = 0
        cutoff: Number | None = None
        for state in chosen:
            while True:
                with self._call(now) as tx:
                    if cutoff is None:  # fixed at the first batch: later ones use the same
                        cutoff = tx.now - age
                    deleted = tx.purge(self.queue, state, cutoff, batch)
                removed += deleted
                if deleted < batch:
                    break
        return Purged(removed, self._forget_groups(now, batch))

    def _forget_groups(self, now: Number | None, batch: int) -> int:
        """Forget the queue's idle groups, ``batch`` groups looked at a transaction."""
        forgotten = 0
        after: str | None = ""
        while after is not None:
            with self._call(now) as tx:
                gone, after = tx.forget_groups(self.queue, after, batch)
            forgotten += gone
        return forgotten

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

    # --- the worker registry (see sqlq.registry) --------------------------------------

    def beat_worker(
        self,
        worker_id: str,
        now: Number | None = None,
        *,
        every: Number,
        concurrency: int = 1,
        holds: Iterable[tuple[str, int, Number]] = (),
        host: str | None = None,
        pid: int | None = None,
    ) -> None:
        """Record in the worker registry that the worker ``worker_id`` of this queue is
        alive and holds ``holds`` (task id, token, and the queue's time of its claim,
        for each lease), and that it writes again every ``every`` seconds (it is stale
        if it does not); ``host`` and ``pid`` default to this process's.  What a Worker
        calls when it starts and once per heartbeat interval.  Also deletes the rows
        of workers stale for longer than sqlq.registry.KEEP_STALE."""
        worker_id = check_name(worker_id, "worker id", InvalidArgument)
        every = check_seconds(every, "every")
        if not every:
            raise InvalidArgument("every must be more than 0 seconds")
        concurrency = check_count(concurrency, "concurrency", MAX_LIMIT)
        host = socket.gethostname() if host is None else check_name(host, "host", InvalidArgument)
        pid = os.getpid() if pid is None else check_count(pid, "pid", MAX_LIMIT, least=0)
        held = held_json(holds)
        with self._call(now) as tx:
            at = tx.now
            stale_at = time_after(at, STALE_BEATS * every)
            tx.prune_workers(at - KEEP_STALE)
            tx.beat_worker(
                WorkerRow(worker_id, self.queue, host, pid, concurrency, at, at, stale_at, held)
            )

    def forget_worker(self, worker_id: str, now: Number | None = None) -> bool:
        """Delete the worker's row from the worker registry (a Worker that stops cleanly
        does); False if there was none."""
        worker_id = check_name(worker_id, "worker id", InvalidArgument)
        with self._call(now) as tx:
            return tx.forget_worker(worker_id)

    def workers(self, now: Number | None = None) -> list[WorkerInfo]:
        """The workers of this queue in the worker registry, as last written (reads only,
        takes no write lock), each marked stale if it missed its writes by ``now`` (by
        default the queue's time, read from the database: its mark, or the database's
        clock if later, never this host's clock alone); those stale for longer than
        sqlq.registry.KEEP_STALE are left out."""
        database_time, rows = self._backend.workers()
        if now is not None:
            at = check_time(now)
        elif self._clock is time.time:  # the queue's time, as its calls wrote the rows
            at = database_time
        else:  # a clock of the caller's
            at = check_time(self._clock())
        mine = (row for row in rows if row.queue == self.queue)
        return listed(mine, at, self._backend.find)

    def stats(self, now: Number | None = None) -> QueueStats:
        """Counts per state, the age of the front of the line, the next deadlines."""
        with self._call(now) as tx:
            return self._stats(tx.stats(self.queue), tx.now)

    def snapshot(self, now: Number | None = None) -> QueueStats:
        """``stats()`` as last written: reads only, in one snapshot, and takes no
        write lock (for a worker's periodic summary, or a watch).  Nothing due is
        applied, so a lease that ran out counts as RESERVED until the next call.
        Counting the tasks per state reads every task of the queue."""
        at = check_time(self._clock() if now is None else now)
        return self._stats(self._backend.snapshot(self.queue), at)

    def _stats(self, figures: Figures, now: Number) -> QueueStats:
        counts, front, deadline, run_at, paused = figures
        return QueueStats(
            counts=counts,
            oldest_available_age=None if front is None else max(0, now - front),
            next_deadline=deadline,
            next_run_at=run_at,
            wal_bytes=self._backend.storage_facts().wal_bytes,
            paused=paused,
        )

    def checkpoint(self) -> Checkpoint:
        """Copy the write-ahead log into the database file now, as far as no reader
        needs it (SQLite's PASSIVE checkpoint), and say how far it got.  On
        PostgreSQL there is no log of the queue's own (the server checkpoints its
        WAL itself): nothing to do, and the answer says so (0 frames).

        sqlq also checkpoints by itself every so often after a commit (SQLite's
        automatic checkpoints are off, since their errors go unseen); an error
        there is logged on the ``sqlq`` logger and the next one tries again.
        Here an error is raised (a :class:`sqlq.errors.StorageError`).
        """
        return self._backend.checkpoint()

    def ready(self, now: Number | None = None) -> bool:
        """Would ``claim`` find a task now?  Reads only and takes no write lock, so
        idle workers can poll cheaply; changes nothing (the next call does)."""
        return self._backend.ready(self.queue, self._reading(now))

    def _reading(self, now: Number | None) -> Number | None:
        """The time of a read: ``now``, or the clock's (None: the database's)."""
        if now is not None:
            return check_time(now)
        return None if self._server_time else check_time(self._clock())

    def next_due(self, now: Number | None = None) -> float | None:
        """Seconds from ``now`` (the queue's time, as ``ready`` reads it) until the queue
        has a task due that a claim does not find before then: the next rate slot of
        a limited group (sqlq.Limit), the next lease to run out, the next WAITING task
        due; 0 if one is due already, None if the queue is paused or holds nothing
        back by time.  Reads only and takes no write lock: an idle Worker waits until
        then at most, not for its next poll.  Tasks added meanwhile are not foretold
        (``on_new_tasks`` announces them where it can)."""
        at, due = self._backend.next_due(self.queue, self._reading(now))
        return None if due is None else max(0.0, float(due - at))

    def counts(self) -> dict[str, int]:
        """Tasks of this queue per state, as of the last call (reads only)."""
        found = self._backend.counts().get(self.queue, {})
        return {state.value: found.get(state.value, 0) for state in State}

    def on_new_tasks(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Have ``callback()`` called (in a thread of the queue's) soon after another
        process or thread commits a task that becomes AVAILABLE in this queue, where
        the database announces it (PostgreSQL's LISTEN/NOTIFY, unless opened with
        ``listen=False``).  Returns the function that stops the calls, or None where
        nothing is announced (SQLite): poll ``ready()`` then.  A Worker uses it to
        claim at once instead of polling fast.  Never waits."""
        if not callable(callback):
            raise InvalidArgument(f"callback must be callable, not {type(callback).__name__}")
        return self._backend.subscribe(self.queue, callback)

    def interrupt_waits(self, after: float | None) -> None:
        """End every wait of this object's calls for a lock, those already waiting
        included, ``after`` seconds from now at the latest: the call then raises
        ``Busy`` (a call whose lock is free goes through).  ``None`` lifts the limit:
        waits last ``busy_timeout`` again.  Thread-safe and safe in a signal handler;
        a stopping ``Worker`` uses it so that its grace period bounds every wait."""
        self._backend.interrupt_waits(None if after is None else check_seconds(after, "after"))

    def close(self) -> None:
        self._backend.close()

    def __reduce__(self) -> Any:
        raise InvalidArgument(
            "a Queue holds a database connection and cannot be sent to another process "
            "(pickled); open a Queue on the same file in that process instead"
        )

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------

    def _call(
        self, now: Number | None, conn: sa.Connection | None = None, one_write: bool = False
    ) -> AbstractContextManager[Transaction]:
        """One call: a transaction at ``now`` in which everything due has happened.
        ``one_write``: the call changes at most one thing, as its last statement, and
        raises nothing after it (see Backend.transaction): not the claims, which
        decode payloads after their write."""
        if now is not None:
            now, opened = check_time(now), self._opened
        elif self._server_time:  # the database's clock, one for every machine
            opened = self._opened
        elif self._guard_clock:
            now, opened = check_time(self._clock()), self._opened_at_reading
            if now > self._kernel_seen + self._step:
                self._check_clock(now)
        else:
            now, opened = check_time(self._clock()), self._opened
        return self._backend.transaction(now, self.queue, conn, opened, one_write)

    def _opened(self, tx: Transaction, asked: Number) -> None:
        """What a call's transaction runs once it has read the clock, if something fell
        due or the call's time ``asked`` (given as ``now``, or by a custom clock)
        was behind the queue's.  Warns if it was far behind: handled at the mark
        as the contract says, but most likely a number given by position where
        another argument was meant (``add(task_id, 5)`` sets now, not the payload)."""
        if asked < tx.mark - self._step:
            self._warn_behind(
                "%s: a call's time %r is %.1f s behind the queue's time and was handled at "
                "the queue's time; was the number meant as another argument? (add(task_id, 5) "
                "sets now, not the payload: pass payload=5)",
                asked,
                tx.mark - asked,
            )
        self._advance(tx, tx.events)

    def _opened_at_reading(self, tx: Transaction, asked: Number) -> None:
        """_opened for a call at a reading of the system clock: also warns if the
        reading is far behind the queue's time."""
        if asked < tx.mark - self._step:
            self._warn_behind(
                "%s: the queue's time is %.1f s ahead of this process's clock (a clock "
                "stepped back, or another process's clock runs ahead); calls use the "
                "queue's time",
                tx.mark - asked,
            )
        self._advance(tx, tx.events)

    def _check_clock(self, reading: Number) -> None:
        """Is this reading of the system clock more than max_clock_step ahead of the
        backend's reference clock (on SQLite, the kernel's)?  Asked whenever a
        reading passes the reference time at the last check plus the step (about
        once a minute with a sound clock), so no reading accepted is more than the
        step ahead of the reference time, whether the clock jumps or creeps."""
        step = self._step
        kernel = self._backend.clock_reference()
        if kernel is None:  # cannot tell: trust the clock for another step
            self._kernel_seen = reading
            return
        if reading - kernel > step:
            raise ClockSkew(
                f"{self._backend.name}: this process's clock is {reading - kernel:+.1f} s "
                f"off the operating system's (more than max_clock_step={step:g} s); "
                "the call was refused so that it cannot move the queue's time"
            )
        self._kernel_seen = kernel

    def _warn_behind(self, message: str, *args: object) -> None:
        """A call's time far behind the queue's (see _opened): one warning a
        LAG_WARNING_EVERY seconds at most; ``message`` is formatted with the
        database's name and ``args``."""
        seen = time.monotonic()
        if seen - self._lag_warned >= LAG_WARNING_EVERY:
            self._lag_warned = seen
            log.warning(message, self._backend.name, *args)

    def _advance(self, tx: Transaction, events: list[Event]) -> None:
        """Run due events in (time, counter) order.  An expired lease may start a
        retry delay that is itself already over: that wake-up joins the merge."""
        later: list[Event] = []
        i = 0
        while i < len(events) or later:
            if later and (i == len(events) or runs_before(later[0][:2], events[i][:2])):
                at, order, task = heapq.heappop(later)
            else:
                at, order, task = events[i]
                i += 1
            if task.state is State.WAITING:
                tx.wake(task, order, at)
                continue
            _, seq, run_at = self._end_lease(tx, task, at, LEASE_EXPIRED)
            if run_at is not None and run_at <= tx.now:
                heapq.heappush(later, (run_at, seq, task._replace(state=State.WAITING, seq=seq)))

    def _end_lease(
        self, tx: Transaction, task: TaskRow, at: Number, error: str | None
    ) -> tuple[State, int, Number | None]:
        """A failed or expired attempt at time ``at``: retry now, retry later, or DEAD;
        CANCELLED if the task was asked to stop.

        Returns the new state, the task's new seq, and when it wakes if WAITING.
        """
        state, run_at = lease_end(task.stop_requested_at is not None, task.attempts,
                                  task.max_attempts, task.retry, self._rng, at)  # fmt: skip
        return state, tx.end_lease(task, state, at, error, run_at), run_at

    def _policy(self, max_attempts: object, retry: object) -> tuple[int, Retry]:
        """The max_attempts and retry policy of a task added now: the queue's, or the
        call's own."""
        return (
            self.max_attempts if max_attempts is None else check_max_attempts(max_attempts),
            self.retry if retry is None else check_retry(retry),
        )

    def _claim(self, tx: Transaction) -> Lease | None:
        while (claimed := tx.claim(self.queue, self.lease_seconds, self.fair)) is not None:
            lease = self._lease(tx, claimed, time_after(tx.now, self.lease_seconds))
            if lease is not None:
                return lease
        return None

    def _lease(self, tx: Transaction, claimed: Claimed, deadline: Number) -> Lease | None:
        """The lease of a task just claimed; None if its payload cannot be decoded, in
        which case the task is dead-lettered (see contract.undecodable_error)."""
        task_id, token, attempt, encoded, name = claimed
        try:
            return Lease(task_id, token, attempt, deadline, payloads.decode(encoded), name)
        except InvalidPayload as exc:
            task = tx.get(self.queue, task_id)
            assert task is not None  # claimed in this transaction
            _kill(tx, task, undecodable_error(exc))
            return None


class _Moved(Exception):
    """Another process moved a schedule on after this call read it: the call is
    rolled back and tried again."""


def _kill(tx: Transaction, task: TaskRow, error: str | None) -> None:
    """End a RESERVED task's lease with DEAD at once, all its attempts used."""
    delta = task.max_attempts - task.attempts
    tx.end_lease(task, State.DEAD, tx.now, error, attempts_delta=delta)


def _waiting(now: Number, run_at: Number) -> Number | None:
    """When a task added at ``now`` to first run at ``run_at`` wakes; None: at once."""
    return run_at if run_at > now else None


def _info(task: TaskRow) -> TaskInfo:
    return TaskInfo(
        task_id=task.task_id,
        state=task.state.value,
        attempts=task.attempts,
        max_attempts=task.max_attempts,
        payload=payloads.readable(task.payload),
        last_error=task.last_error,
        token=task.token,
        deadline=task.deadline,
        run_at=task.run_at,
        created_at=task.created_at,
        updated_at=task.updated_at,
        finished_at=task.finished_at,
        name=task.name,
        stop_requested_at=task.stop_requested_at,
        result=payloads.readable(task.result),
        progress=task.progress,
        progress_message=task.progress_message,
        group=task.group,
        key=task.dedupe_key,
        priority=task.priority,
    )
