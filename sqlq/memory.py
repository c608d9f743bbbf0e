"""WorkQueue: the lease queue in memory, every call passing the current time.

Data structures (n = number of tasks):

* ``_tasks``: task id -> record, a list indexed by the ``_STATE``... constants
  below (a list is built in one step; an object would cost a constructor call).
* ``_line``: a FIFO (deque) of the ids of the AVAILABLE tasks of priority
  ``_line_priority``; ``_others``: priority -> such a FIFO, for every other
  priority in line (empty while one priority is in line, the usual case, and
  whenever ``_line`` is).  Only ``reserve``/``claim`` take from them, and every
  move to AVAILABLE appends to one.  A task's place in the line (line key, as
  rules.line_key, and counter) is kept in its record (``_WHEN``, ``_SEQ``, the
  latter not written by a plain queue); within a priority the keys grow with the
  time high-water mark, so each FIFO is in line order, and a line of one priority
  costs an append and a popleft.
* ``_fronts``: while ``_others`` holds a FIFO, a min-heap of (line key, counter,
  priority), one for the front of each FIFO: its top is the front of the line.
* ``_groups``: group -> _Group, for per-key limits: a heap of the line entries of
  the group's AVAILABLE tasks (a grouped task is never in ``_line``), its leases,
  its rate's next start and its turn; ``_ready``: a heap of the groups that may
  start a task, by their fronts (or round robin), stale entries dropped when they
  reach the top.  Both stay empty until a grouped task is added; ``purge`` drops
  the idle groups (see contract.py), and a task of one makes it anew.
* ``_leases``: a FIFO (deque) of (deadline, token, task id), one per
  reservation.  Every deadline is ``time_after(now, lease_seconds)`` with ``now``
  the time high-water mark, and tokens only grow, so it is sorted as it is
  appended to.
* ``_extended``: a min-heap of the same entries for ``extend``, whose deadlines
  come in any order.
* ``_waiting``: a min-heap of (run_at, order, task id), one per WAITING period.
  A task leaves WAITING only when its entry is popped, so no entry is stale.

Tokens and orders come from one counter that only grows, so ties in time
resolve in the order things happened.  Lease entries are deleted lazily: one
that no longer matches its task (completed, failed, extended, reserved again,
purged) is dropped when it reaches the front.

``_plain``: True until a task with a group or a priority other than 0 is added, a
running task is asked to stop or the queue is paused (and False from then on).
While it holds, the line is one FIFO, no lease frees a group's slot and none ends
in CANCELLED, and claims, completions and lease ends test that one flag instead
of the group, stop, pause and priority of each task and line; add and the lease
ends append to the FIFO without writing the task's counter (see ``_SEQ``).

``_due`` is a lower bound on the time of the next event (a lease expiry or a
wake-up; a stale entry's time counts too) and never above MAX_TIME.  A call
whose ``now`` is an int or float from the high-water mark up to below ``_due``
is valid and has nothing to run: the hot calls check exactly that inline and
call ``_advance`` only otherwise.  They also look a given id up before checking
it: an id found in ``_tasks`` was checked when it was added.  (Each function call
costs about as much as the checks, so the usual cases are written out in place.)

Every call of the core contract is O(log n) amortised: each event pushes one
entry, and each entry is popped at most once.  Inspection calls (``tasks``,
``dead``, ``redrive`` of all, ``purge``) walk the tasks: O(n), and so do
``cancel`` of a task not started and a debounce that moves one (sqlq.keys), which
take it out of the line or the heap of WAITING tasks (so that neither ever holds
an entry of another state).  Dedupe keys live apart from the records (``_keys``:
each key's tasks, the latest holder last; ``_key_of``), so that tasks without one
cost nothing more.
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Final, overload

from . import payload as payloads
from .contract import (
    DEFAULT_AGING,
    FINISHED,
    LEASE_EXPIRED,
    MAX_ID_LENGTH,
    MAX_TIME,
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
    check_result,
    check_retry,
    check_rng,
    check_seconds,
    check_settings,
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
from .errors import InvalidArgument, InvalidPayload
from .keys import Added, Keyed, KeyRule, check_key, on_holder
from .records import GroupUse, Heartbeat, Lease, Purged, QueueStats, TaskInfo
from .results import DEFAULT_POLL, ResultWait, wait
from .retry import Retry
from .rules import line_key
from .schedule import Schedule, Ticked, check_schedule, encoded_tasks, plan

# States are kept as their plain str values: compared with ``is``, returned as they are.
_WAITING: Final = State.WAITING.value
_AVAILABLE: Final = State.AVAILABLE.value
_RESERVED: Final = State.RESERVED.value
_COMPLETED: Final = State.COMPLETED.value
_DEAD: Final = State.DEAD.value
_CANCELLED: Final = State.CANCELLED.value

# A task's record: a list with these fields.
_STATE: Final = 0
_ATTEMPTS: Final = 1
_TOKEN: Final = 2  # the latest lease's token; 0 before the first
_WHEN: Final = (
    3  # the lease's deadline while RESERVED, run_at while WAITING, line key while AVAILABLE
)
_PAYLOAD: Final = 4
_ERROR: Final = 5
_CREATED: Final = 6
_UPDATED: Final = 7
_FINISHED: Final = 8
_MAX_ATTEMPTS: Final = 9
_RETRY: Final = 10  # the task's retry policy; None for Retry.immediate() (no delay to draw)
_NAME: Final = 11
_STOP: Final = 12  # when cancel asked the running task to stop; None if it did not
_PRIORITY: Final = 13
_GROUP: Final = 14  # the task's group (see set_limit), or None
# The counter when it last joined the line (its place among equal line keys).  A plain
# queue (see _plain) does not write it: its line is one FIFO, in which places are
# never compared, and what a task joining it holds there is at most the counter
# then, so below the place of every task that joins after the queue stops being plain.
_SEQ: Final = 15

Record = list[Any]
Entry = tuple[Number, int, str]
#: The finished states (a task in one holds no place in a group).
_ENDED: Final = frozenset(state.value for state in FINISHED)

#: Stands for an empty heap or FIFO: later than any event.
_NEVER: Final[Entry] = (float("inf"), 0, "")


class WorkQueue:
    """An in-memory lease queue.  Not thread-safe; not durable.

    Time never goes backwards: a call whose ``now`` is below the highest time
    seen so far is handled at that highest time.
    """

    def __init__(
        self,
        lease_seconds: Number,
        max_attempts: int,
        *,
        retry: Retry | None = None,
        max_payload_bytes: int = payloads.DEFAULT_MAX_PAYLOAD_BYTES,
        rng: random.Random | None = None,
        aging: float | None = DEFAULT_AGING,
        fair: bool = False,
    ) -> None:
        self.lease_seconds, self.max_attempts = check_settings(lease_seconds, max_attempts)
        self.aging = check_aging(aging)
        self.fair = check_flag(fair, "fair")
        self.retry = check_retry(retry)
        self._retry = _stored(self.retry)
        self.max_payload_bytes = payloads.check_limit(max_payload_bytes)
        self._rng = check_rng(rng)
        self._tasks: dict[str, Record] = {}
        self._line: deque[str] = deque()
        self._line_priority = 0
        self._others: dict[int, deque[str]] = {}
        self._fronts: list[tuple[Number, int, int]] = []
        self._leases: deque[Entry] = deque()
        self._extended: list[Entry] = []
        self._waiting: list[Entry] = []
        self._counter = 0
        self._now: Number = 0
        self._due: Number = MAX_TIME
        self._schedules: dict[str, Number] = {}  # schedule name -> ticks handled up to
        self._paused = False
        # No group, no priority but 0, no stop request and no pause so far: the lease
        # calls take the seed's paths (one FIFO, no slots, no stops).  Once False, it
        # stays False.
        self._plain = True
        # Kept apart from the records, so that tasks without them cost nothing more:
        self._results: dict[str, str] = {}  # task id -> stored result, if not None
        self._progress: dict[str, tuple[float | None, str | None]] = {}  # latest report
        self._keys: dict[str, list[str]] = {}  # dedupe key -> its tasks, the latest holder last
        self._key_of: dict[str, str] = {}  # task id -> its dedupe key
        # Per-key limits (see set_limit): empty until a task with a group is added.
        self._groups: dict[str, _Group] = {}
        self._limits: dict[str, Limit] = {}  # by group, '' for the default
        self._ready: list[tuple[Any, ...]] = []  # heap of (order..., group): see _push

    # --- the core contract --------------------------------------------------------

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
        if self._plain:  # _join_line, written out for a plain queue (see _SEQ)
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

    def reserve(self, now: Number) -> str | None:
        """Lease the front task until ``now + lease_seconds``; None if none is available."""
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        return self._take(now)

    def complete(
        self, task_id: str, now: Number, *, token: int | None = None, result: Any = None
    ) -> bool:
        """Mark a RESERVED task COMPLETED; False if it is not RESERVED right now.

        With ``token``, only that lease may complete the task; asked again with
        the token of the lease that completed it, the answer is True again (the
        first ``result`` stays).  ``result`` (a JSON value) is stored with the
        task: see ``result``.
        """
        record = self._tasks.get(task_id) if type(task_id) is str else None
        if record is None:
            task_id = check_task_id(task_id)
            record = self._tasks.get(task_id)
        if token is not None:
            token = check_token(token)
        if result is not None:  # from here on, the result as stored
            result = check_result(result, self.max_payload_bytes)
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        if record is None:
            return False
        state = record[_STATE]
        if state is not _RESERVED:
            return token is not None and state is _COMPLETED and record[_TOKEN] == token
        if token is not None and record[_TOKEN] != token:
            return False
        if not self._plain:
            self._free_slot(record)
        record[_STATE] = _COMPLETED
        record[_UPDATED] = record[_FINISHED] = now
        if result is not None:
            self._results[task_id] = result
        return True

    def complete_and_claim(
        self, task_id: str, now: Number, *, token: int, result: Any = None
    ) -> tuple[bool, Lease | None]:
        """``complete(task_id, token=token, result=result)`` and ``claim()`` as one call."""
        token = check_token(token)
        done = self.complete(task_id, now, token=token, result=result)
        return done, self._claim(self._now)

    def fail(
        self,
        task_id: str,
        now: Number,
        *,
        token: int | None = None,
        error: object = None,
        retry: bool = True,
    ) -> str | None:
        """Fail a RESERVED task: AVAILABLE again, WAITING for a retry delay, or DEAD.

        None if the task is not RESERVED (or, with ``token``, not under that lease).
        With ``retry=False`` the task goes DEAD at once, its attempts all used.
        """
        record = self._tasks.get(task_id) if type(task_id) is str else None
        if record is None:
            task_id = check_task_id(task_id)
            record = self._tasks.get(task_id)
        if token is not None:
            token = check_token(token)
        text = None if error is None else check_error(error)
        if retry is not True:
            retry = check_flag(retry, "retry")
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            now = self._advance(now)
        if record is None or record[_STATE] is not _RESERVED:
            return None
        if token is not None and record[_TOKEN] != token:
            return None
        if not retry and record[_STOP] is None:
            self._free_slot(record)
            _kill(record, now, text)
            return _DEAD
        return self._end_lease(task_id, record, now, text)

    def status(self, task_id: str, now: Number) -> str | None:
        """The task's state after due events, or None for an unknown id."""
        record = self._tasks.get(task_id) if type(task_id) is str else None
        if record is None:
            record = self._tasks.get(check_task_id(task_id))
        if (type(now) is int or type(now) is float) and self._now <= now < self._due:
            self._now = now
        else:
            self._advance(now)
        return None if record is None else record[_STATE]

    # --- leases -------------------------------------------------------------------

    def claim(self, now: Number) -> Lease | None:
        """Like ``reserve``, but returns the whole lease: token, attempt, deadline, payload."""
        return self._claim(self._advance(now))

    def extend(
        self, task_id: str, token: int, now: Number, *, seconds: Number | None = None
    ) -> Number | None:
        """Heartbeat: the lease now ends at ``now + seconds`` (default lease_seconds).

        Returns the new deadline, or None if ``token`` is not the task's current
        lease (it ran out, ended, or another worker holds the task now).
        """
        beat = self.heartbeat(task_id, token, now, seconds=seconds)
        return None if beat is None else beat.deadline

    def heartbeat(
        self, task_id: str, token: int, now: Number, *, seconds: Number | None = None
    ) -> Heartbeat | None:
        """``extend``, answering also whether the task was asked to stop (``cancel``)."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        length = self.lease_seconds if seconds is None else check_seconds(seconds, "seconds")
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:
            return None
        record[_WHEN] = deadline = time_after(now, length)
        record[_UPDATED] = now
        heapq.heappush(self._extended, (deadline, token, task_id))
        self._due = min(self._due, deadline)
        return Heartbeat(deadline, record[_STOP] is not None)

    def release(self, task_id: str, token: int, now: Number) -> bool:
        """Give a lease back without counting its attempt: the task goes to the back of the line."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:
            return False
        self._free_slot(record)
        if record[_STOP] is not None:  # asked to stop: it runs no more (rules.released)
            _finish(record, _CANCELLED, now, record[_ERROR])
            return True
        record[_ATTEMPTS] -= 1
        self._make_available(task_id, record, now)
        return True

    # --- cancel and pause -------------------------------------------------------------

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

    # --- batches --------------------------------------------------------------------

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

    def claim_many(self, n: int, now: Number) -> list[Lease]:
        """Up to ``n`` leases from the front of the line, as one call."""
        n = check_count(n, "n")
        now = self._advance(now)
        leases: list[Lease] = []
        while len(leases) < n and (lease := self._claim(now)) is not None:
            leases.append(lease)
        return leases

    def complete_many(
        self, leases: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]], now: Number
    ) -> list[bool]:
        """``complete(task_id, token=token)`` for each lease (or (id, token) pair, or
        (id, token, result) triple), as one call."""
        items = check_leases(leases, self.max_payload_bytes)
        now = self._advance(now)
        return self._complete_many(items, now)

    def _complete_many(self, items: list[Completion], now: Number) -> list[bool]:
        """complete each (id, token, stored result), all checked already (a result is
        decoded for complete to store again: only a completion with one pays)."""
        return [
            self.complete(
                task_id,
                now,
                token=token,
                result=None if stored is None else payloads.decode(stored),
            )
            for task_id, token, stored in items
        ]

    def settle_and_claim(
        self,
        n: int,
        now: Number,
        *,
        completed: Iterable[Lease | tuple[str, int] | tuple[str, int, Any]] = (),
        failed: Iterable[tuple[str, int, object] | tuple[str, int, object, bool]] = (),
    ) -> tuple[list[bool], list[str | None], list[Lease]]:
        """``complete`` each of ``completed`` (Leases, (id, token) pairs or (id, token,
        result) triples), ``fail`` each of ``failed`` (id, token, error), then claim
        up to ``n`` (0 to MAX_BATCH), as one call."""
        n = check_count(n, "n", least=0)
        done_items = check_leases(completed, self.max_payload_bytes, "completed")
        fail_items = check_failures(failed)
        now = self._advance(now)
        done = self._complete_many(done_items, now)
        states = [
            self.fail(task_id, now, token=token, error=text, retry=retry)
            for task_id, token, text, retry in fail_items
        ]
        return done, states, self.claim_many(n, now) if n else []

    # --- results and progress (see contract.check_result) ---------------------------

    def result(self, task_id: str, now: Number) -> Any:
        """The result stored with a COMPLETED task (None if it was completed without
        one).  NoResult if the id is unknown or the task is not COMPLETED; TaskDead
        (a NoResult with the last error) if it is DEAD."""
        task_id = check_task_id(task_id)
        self._advance(now)
        return result_of(task_id, self._outcome(task_id))

    def wait_for_result(
        self,
        task_id: str,
        timeout: Number,
        *,
        poll: Number = DEFAULT_POLL,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> Any:
        """``result``, once the task is COMPLETED or DEAD (TaskDead), looking again
        with pauses that double up to ``poll`` seconds until ``timeout`` seconds of
        ``clock`` have passed (ResultTimeout); see sqlq.results.  Each look is at the
        latest time a call gave: only calls of other threads change the answer."""
        return wait(ResultWait(task_id, timeout, poll, clock), self._outcome, sleep)

    def _outcome(self, task_id: str) -> Outcome | None:
        record = self._tasks.get(task_id)
        if record is None:
            return None
        return record[_STATE], self._results.get(task_id), record[_ERROR]

    def progress(
        self,
        task_id: str,
        token: int,
        value: Number | None = None,
        message: str | None = None,
        *,
        now: Number,
    ) -> bool:
        """Report the progress of a running task: a number (on a scale of the
        handler's own) and/or a message, shown by ``info``.  False, and no change,
        if ``token`` is not the task's current lease (as ``extend``)."""
        task_id = check_task_id(task_id)
        token = check_token(token)
        report = check_progress(value, message)
        now = self._advance(now)
        record = self._tasks.get(task_id)
        if record is None or record[_STATE] is not _RESERVED or record[_TOKEN] != token:
            return False
        self._progress[task_id] = report
        record[_UPDATED] = now
        return True

    # --- per-key limits (see contract.check_limit) ----------------------------------

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
        difference (see contract.py)."""
        for name, group in self._groups.items():
            if key in ("", name):
                cap, spacing = _applied(self._limit_of(name))
                group.tat -= max(0, (group.spacing or 0) - (spacing or 0))
                group.cap, group.spacing = cap, spacing
                self._push(name, group)

    # --- dead letters, retention, inspection ---------------------------------------

    def info(self, task_id: str, now: Number) -> TaskInfo | None:
        """Everything stored about a task, or None."""
        task_id = check_task_id(task_id)
        self._advance(now)
        record = self._tasks.get(task_id)
        return None if record is None else self._info(task_id, record)

    def tasks(self, now: Number, *, state: str | None = None, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` tasks (of one state, if given), in the order they were added."""
        wanted = None if state is None else check_states(state, tuple(State))[0].value
        limit = check_count(limit, "limit")
        self._advance(now)
        found = []
        for task_id, record in self._tasks.items():
            if wanted is None or record[_STATE] is wanted:
                found.append(self._info(task_id, record))
                if len(found) == limit:
                    break
        return found

    def dead(self, now: Number, *, limit: int = 100) -> list[TaskInfo]:
        """Up to ``limit`` DEAD tasks, the longest dead first."""
        limit = check_count(limit, "limit")
        self._advance(now)
        return [self._info(t, self._tasks[t]) for t in self._dead_ids()[:limit]]

    def redrive(self, now: Number, task_ids: Iterable[str] | None = None) -> int:
        """Send DEAD tasks (the given ones, or all) back to the line with attempts reset.

        Returns how many were redriven; ids that are not DEAD are skipped.
        """
        ids = check_task_ids(task_ids)
        now = self._advance(now)
        count = 0
        for task_id in self._dead_ids() if ids is None else ids:
            record = self._tasks.get(task_id)
            if record is not None and record[_STATE] is _DEAD and self._key_free(task_id):
                record[_ATTEMPTS] = 0
                record[_FINISHED] = None
                if record[_GROUP] is not None and record[_GROUP] not in self._groups:
                    self._make_group(record[_GROUP])  # purge forgot it
                self._make_available(task_id, record, now)
                count += 1
        return count

    def purge(
        self,
        now: Number,
        *,
        states: Iterable[str] = ("COMPLETED",),
        older_than: Number = 0,
    ) -> Purged:
        """Forget COMPLETED (and/or DEAD, CANCELLED) tasks finished at least ``older_than``
        seconds ago, then the idle groups (see sqlq.contract, Per-key limits).

        Returns how many tasks were removed (their ids can be added again), an int
        whose ``groups`` says how many groups were forgotten.
        """
        chosen = [s.value for s in check_states(states, FINISHED)]
        age = check_seconds(older_than, "older_than")
        now = self._advance(now)
        doomed = [
            t
            for t, record in self._tasks.items()
            if record[_STATE] in chosen
            and record[_FINISHED] is not None
            and record[_FINISHED] <= now - age
        ]
        for task_id in doomed:
            del self._tasks[task_id]
            self._results.pop(task_id, None)
            self._progress.pop(task_id, None)
            key = self._key_of.pop(task_id, None)
            if key is not None:
                self._keys[key].remove(task_id)
        return Purged(len(doomed), self._forget_groups(now) if self._groups else 0)

    def _forget_groups(self, now: Number) -> int:
        """Drop the idle groups: no unfinished task (and so no lease, nothing in
        line) and no start owed to the rate at ``now`` (walks the tasks: O(n)).
        Their entries leave the heap of groups that may start a task with them."""
        busy = {r[_GROUP] for r in self._tasks.values() if r[_STATE] not in _ENDED}
        groups = self._groups
        idle = [
            name
            for name, group in groups.items()
            if name not in busy and not group.running and group.tat <= now
        ]
        for name in idle:
            del groups[name]
        if idle:
            self._ready = [entry for entry in self._ready if entry[-1] in groups]
            heapq.heapify(self._ready)
        return len(idle)

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

    def stats(self, now: Number) -> QueueStats:
        """Counts per state, the age of the front of the line, the next deadlines."""
        now = self._advance(now)
        counts = self.counts()
        first = min(self._line_fronts(), default=None)
        front = None if first is None else self._tasks[first[2]]
        waking = self._waiting[0][0] if self._waiting else None
        return QueueStats(
            counts=counts,
            oldest_available_age=None if front is None else now - front[_UPDATED],
            next_deadline=self._next_deadline(),
            next_run_at=waking,
            paused=self._paused,
        )

    def ready(self, now: Number) -> bool:
        """Would ``claim`` find a task now?  Changes nothing (the next call does)."""
        now = max(check_time(now), self._now)
        if self._paused:
            return False
        if self._line or (self._waiting and self._waiting[0][0] <= now):
            return True
        if self._groups and self._ready_group(now) is not None:
            return True
        deadline = self._next_deadline()
        return deadline is not None and deadline <= now

    def counts(self) -> dict[str, int]:
        """Tasks per state, as of the last call."""
        counts = dict.fromkeys((s.value for s in State), 0)
        for record in self._tasks.values():
            counts[record[_STATE]] += 1
        return counts

    # --- internals --------------------------------------------------------------

    def _advance(self, now: Number) -> Number:
        """Check ``now`` and apply the time high-water mark; then run every lease
        expiry and wake-up due by then, in (time, counter) order, and set ``_due``
        to the time of the soonest entry left.  Returns the time the call is
        handled at.  (The sooner of the two heaps' fronts is kept while neither heap
        changes, so that each entry costs one comparison of tuples, not two.)"""
        if not ((type(now) is int or type(now) is float) and 0 <= now <= MAX_TIME):
            now = check_time(now)
        if now < self._now:
            now = self._now
        self._now = now
        if now < self._due:
            return now
        tasks, leases = self._tasks, self._leases
        other = None  # the sooner of the two heaps' fronts (None: to be found again)
        while True:
            if other is None:
                extended, waiting = self._extended, self._waiting
                other = extended[0] if extended else _NEVER
                if waiting and waiting[0] < other:
                    other = waiting[0]
            first = leases[0] if leases else _NEVER  # the soonest entry
            if other < first:
                first = other
            when, key, task_id = first
            if when > now:
                break
            if first is not other:
                leases.popleft()
            else:
                other = None
                if waiting and first is waiting[0]:  # a wake-up: never stale (module docstring)
                    heapq.heappop(waiting)
                    self._make_available(task_id, tasks[task_id], when)
                    continue
                heapq.heappop(extended)
            record = tasks.get(task_id)
            if (
                record is not None
                and record[_STATE] is _RESERVED
                and record[_TOKEN] == key
                and record[_WHEN] == when
                and self._end_lease(task_id, record, when, LEASE_EXPIRED) is _WAITING
            ):
                other = None  # its retry's wake-up may be the soonest now
        self._due = when if when < MAX_TIME else MAX_TIME
        return now

    def _policy(self, max_attempts: object, retry: object) -> tuple[int, Retry | None]:
        """A new task's max_attempts and retry policy (as records keep it): the queue's,
        or the call's own."""
        return (
            self.max_attempts if max_attempts is None else check_max_attempts(max_attempts),
            self._retry if retry is None else _stored(check_retry(retry)),
        )

    def _insert(self, task_id: str, task: tuple[Any, ...], now: Number, run_at: Number) -> bool:
        """Add a task: ``task`` is (encoded payload, name, max_attempts, stored retry,
        priority, group)."""
        tasks = self._tasks
        if task_id in tasks:
            return False
        encoded, name, max_attempts, retry, priority, group = task
        record = tasks[task_id] = [_AVAILABLE, 0, 0, 0, encoded, None, now, now, None,
                                   max_attempts, retry, name, None, priority, group, 0]  # fmt: skip
        if priority or group is not None:
            self._plain = False
            if group is not None and group not in self._groups:
                self._make_group(group)
        if run_at > now:
            self._make_waiting(task_id, record, run_at, now)
        else:
            self._join_line(task_id, record)
        return True

    def _take(self, now: Number) -> str | None:
        """Lease the front of the line: the task's id, or None if the line is empty."""
        if self._plain:  # the seed's line: one FIFO
            if not self._line:
                return None
            task_id = self._line.popleft()
        elif not self._groups:
            line = self._line
            if not line or self._paused:
                return None
            task_id = self._pop_line() if self._others else line.popleft()
        elif self._paused or (task_id := self._take_front(now)) is None:  # type: ignore[assignment]
            return None
        record = self._tasks[task_id]
        self._counter = token = self._counter + 1
        deadline = now + self.lease_seconds
        if deadline > MAX_TIME:  # time_after, inline
            deadline = MAX_TIME
        record[_STATE] = _RESERVED
        record[_ATTEMPTS] += 1
        record[_TOKEN] = token
        record[_WHEN] = deadline
        record[_UPDATED] = now
        self._leases.append((deadline, token, task_id))
        if deadline < self._due:
            self._due = deadline
        return task_id

    def _claim(self, now: Number) -> Lease | None:
        """Lease the front of the line; a task whose payload cannot be decoded is
        dead-lettered on the way (see contract.undecodable_error)."""
        while not self._paused:
            if self._groups:
                front = self._front(now)
                if front is None:
                    return None
                task_id = front[0]
            elif self._line:
                task_id = self._line_head()
            else:
                return None
            record = self._tasks[task_id]
            try:  # before the lease is taken: a RecursionError (short of stack) changes nothing
                payload = payloads.decode(record[_PAYLOAD])
            except InvalidPayload as exc:
                self._take(now)
                self._free_slot(record)
                _kill(record, now, undecodable_error(exc))
                continue
            self._take(now)
            return Lease(
                task_id, record[_TOKEN], record[_ATTEMPTS], record[_WHEN], payload, record[_NAME]
            )
        return None

    def _end_lease(self, task_id: str, record: Record, when: Number, error: str | None) -> str:
        """A failed or expired attempt at time ``when``: retry now, retry later, or DEAD
        (rules.lease_end's rule and _make_available, written out: this runs for
        every expiry, and calling lease_end here cost about 6.5% of a mixed call,
        callgrind; see sqlq/rules.py.  WorkQueue is the oracle the property tests hold Queue,
        which calls rules.lease_end, to, call by call)."""
        if not self._plain:
            self._free_slot(record)
            if record[_STOP] is not None:  # asked to stop: it runs no more
                _finish(record, _CANCELLED, when, error)
                return _CANCELLED
        attempts = record[_ATTEMPTS]
        retry = record[_RETRY]
        delay = 0 if retry is None else retry.delay(attempts, self._rng)
        record[_ERROR] = error
        record[_UPDATED] = when
        if attempts >= record[_MAX_ATTEMPTS]:
            record[_STATE] = _DEAD
            record[_FINISHED] = when
            return _DEAD
        if delay > 0:
            self._make_waiting(task_id, record, time_after(when, delay), when)
            return _WAITING
        record[_STATE] = _AVAILABLE
        if self._plain:  # _join_line, written out for a plain queue (see _SEQ)
            self._counter += 1
            record[_WHEN] = self._now
            self._line.append(task_id)
        else:
            self._join_line(task_id, record)
        return _AVAILABLE

    def _unqueue(self, task_id: str, state: str) -> None:
        """Take an AVAILABLE task out of the line, or a WAITING one out of the heap of
        wake-ups (O(n): cancel and debounce)."""
        if state is _AVAILABLE:
            record = self._tasks[task_id]
            if record[_GROUP] is None:
                self._leave_line(task_id)
            else:
                self._leave_group_line(task_id, record[_GROUP])
        else:
            self._waiting = [entry for entry in self._waiting if entry[2] != task_id]
            heapq.heapify(self._waiting)

    def _make_available(self, task_id: str, record: Record, now: Number) -> None:
        record[_STATE] = _AVAILABLE
        record[_UPDATED] = now
        self._join_line(task_id, record)

    def _join_line(self, task_id: str, record: Record) -> None:
        """Put an AVAILABLE task in line at the call's time (an expiry or a wake-up
        too, as the database does), by its priority and the queue's aging (the one
        every task of this object was added with); its line position comes from the
        counter, as the database numbers it."""
        self._counter = seq = self._counter + 1
        priority = record[_PRIORITY]
        key = record[_WHEN] = line_key(self._now, priority, self.aging) if priority else self._now
        record[_SEQ] = seq
        if record[_GROUP] is not None:
            self._group_append(record[_GROUP], (key, seq, task_id))
            return
        line = self._line
        if priority == self._line_priority or not line:  # (no _others without a _line)
            self._line_priority = priority
            line.append(task_id)
            return
        others = self._others
        fifo = others.get(priority)
        if fifo is not None:
            fifo.append(task_id)
            return
        if not others:  # a second priority joins: the fronts are kept from now on
            self._fronts = [(*self._place(line[0]), self._line_priority)]
        others[priority] = deque((task_id,))
        heapq.heappush(self._fronts, (key, seq, priority))

    def _place(self, task_id: str) -> tuple[Number, int]:
        """An AVAILABLE task's place in the line: (line key, counter)."""
        record = self._tasks[task_id]
        return record[_WHEN], record[_SEQ]

    def _line_head(self) -> str:
        """The id at the front of the (ungrouped, not empty) line."""
        if not self._others:
            return self._line[0]
        priority = self._fronts[0][2]
        fifo = self._line if priority == self._line_priority else self._others[priority]
        return fifo[0]

    def _pop_line(self) -> str:
        """Take the front of the (ungrouped, not empty) line: its id."""
        others = self._others
        if not others:
            return self._line.popleft()
        fronts = self._fronts
        priority = fronts[0][2]
        fifo = self._line if priority == self._line_priority else others[priority]
        task_id = fifo.popleft()
        if fifo:
            heapq.heapreplace(fronts, (*self._place(fifo[0]), priority))
            return task_id
        heapq.heappop(fronts)
        if fifo is self._line:  # the next priority's FIFO takes its place
            self._line_priority = fronts[0][2]
            self._line = others.pop(self._line_priority)
        else:
            del others[priority]
        if not others:
            self._fronts = []
        return task_id

    def _leave_line(self, task_id: str) -> None:
        """Take an AVAILABLE task out of the (ungrouped) line (cancel, debounce): O(n)."""
        fifos = {self._line_priority: self._line, **self._others}
        for fifo in fifos.values():
            if task_id in fifo:
                fifo.remove(task_id)
        left = {priority: fifo for priority, fifo in fifos.items() if fifo}
        if left:  # the first FIFO left is the _line, the others stay _others
            self._line_priority = next(iter(left))
            self._line = left.pop(self._line_priority)
        self._others = left
        self._fronts = []
        if left:
            self._fronts = [(*self._place(fifo[0]), p) for p, fifo in fifos.items() if fifo]
            heapq.heapify(self._fronts)

    def _make_waiting(self, task_id: str, record: Record, run_at: Number, now: Number) -> None:
        self._counter += 1
        record[_STATE] = _WAITING
        record[_WHEN] = run_at
        record[_UPDATED] = now
        heapq.heappush(self._waiting, (run_at, self._counter, task_id))
        if run_at < self._due:
            self._due = run_at

    def _next_deadline(self) -> Number | None:
        """The soonest deadline of a live lease, dropping stale entries on the way."""
        leases, extended = self._leases, self._extended
        while leases and not self._live(leases[0]):
            leases.popleft()
        while extended and not self._live(extended[0]):
            heapq.heappop(extended)
        return min((entries[0][0] for entries in (leases, extended) if entries), default=None)

    def _live(self, entry: Entry) -> bool:
        """Is this lease entry the task's current lease, with its current deadline?
        (``_advance`` writes the same test out: a call per expiry costs ~4% of a call.)"""
        deadline, token, task_id = entry
        record = self._tasks.get(task_id)
        return (
            record is not None
            and record[_STATE] is _RESERVED
            and record[_TOKEN] == token
            and record[_WHEN] == deadline
        )

    def _key_free(self, task_id: str) -> bool:
        """May this finished task become a holder of its key again (redrive)?  Yes if
        it has no key or no task holds it; then it is the key's latest holder."""
        key = self._key_of.get(task_id)
        if key is None:
            return True
        holders = self._keys[key]
        if self._tasks[holders[-1]][_FINISHED] is None:
            return False
        holders.remove(task_id)
        holders.append(task_id)
        return True

    def _dead_ids(self) -> list[str]:
        dead = [
            (r[_FINISHED], i, tid)
            for i, (tid, r) in enumerate(self._tasks.items())
            if r[_STATE] is _DEAD
        ]
        return [tid for _, _, tid in sorted(dead)]

    def _info(self, task_id: str, record: Record) -> TaskInfo:
        state = record[_STATE]
        progress, message = self._progress.get(task_id, (None, None))
        return TaskInfo(
            task_id=task_id,
            state=state,
            attempts=record[_ATTEMPTS],
            max_attempts=record[_MAX_ATTEMPTS],
            payload=payloads.readable(record[_PAYLOAD]),
            last_error=record[_ERROR],
            token=record[_TOKEN] or None,
            deadline=record[_WHEN] if state is _RESERVED else None,
            run_at=record[_WHEN] if state is _WAITING else None,
            created_at=record[_CREATED],
            updated_at=record[_UPDATED],
            finished_at=record[_FINISHED],
            name=record[_NAME],
            stop_requested_at=record[_STOP],
            result=payloads.readable(self._results.get(task_id)),
            progress=progress,
            progress_message=message,
            group=record[_GROUP],
            key=self._key_of.get(task_id),
            priority=record[_PRIORITY],
        )

    # --- per-key limits: the groups' lines and the heap of groups that may start ------

    def _make_group(self, name: str) -> None:
        """A group's first task (or its first since purge forgot it): a new group,
        under the limits that apply to it."""
        self._groups[name] = _Group(self._limit_of(name))

    def _limit_of(self, group: str) -> Limit:
        """The limits that apply to ``group``: its own, else the queue's default."""
        return self._limits.get(group) or self._limits.get("") or _NO_LIMIT

    def _push(self, name: str, group: _Group) -> None:
        """Enter the group in the heap of groups that may start a task, if it may (by
        its front and its free slots; its rate is looked at when a claim pops it).
        Entries are never removed: one that no longer matches its group (its order
        moved, or it filled its slots) is dropped when it reaches the top."""
        if group.line and group.running < group.cap:  # rules.admits, written out
            heapq.heappush(self._ready, (*group.order(self.fair), name))

    def _ready_group(self, now: Number) -> str | None:
        """The first group (in line order, or round robin) that may start a task at
        ``now``; groups waiting out their rate are passed over and kept."""
        ready, groups = self._ready, self._groups
        passed: list[tuple[Any, ...]] = []
        found = None
        while ready:
            entry = ready[0]
            group = groups[entry[-1]]
            if not group.line or group.running >= group.cap or entry[:-1] != group.order(self.fair):
                heapq.heappop(ready)  # stale
            elif group.tat > now:
                passed.append(heapq.heappop(ready))
            else:
                found = entry[-1]
                break
        for entry in passed:
            heapq.heappush(ready, entry)
        return found

    def _front(self, now: Number) -> tuple[str, str | None] | None:
        """The task a claim at ``now`` takes, and its group: the front of the
        ungrouped line or of the first group that may start one, whichever is first
        in line; None if neither has one."""
        name = self._ready_group(now)
        head = self._line_head() if self._line else None
        if name is None:
            return None if head is None else (head, None)
        entry = self._groups[name].line[0]
        if head is not None and self._place(head) < entry[:2]:
            return head, None
        return entry[2], name

    def _take_front(self, now: Number) -> str | None:
        """Take the task ``_front`` names out of its line, counting its group's start
        (a slot, its rate, its turn in the round robin)."""
        front = self._front(now)
        if front is None:
            return None
        task_id, name = front
        if name is None:
            self._pop_line()
            return task_id
        group = self._groups[name]
        heapq.heappop(group.line)
        group.running += 1
        if group.spacing is not None:
            group.tat = max(group.tat, now) + group.spacing
        group.turn = self._counter + 1  # the lease's token
        self._push(name, group)
        return task_id

    def _group_append(self, name: str, entry: Entry) -> None:
        """A task of group ``name`` joins its group's line (``entry``: its line key,
        counter and id); the group enters the heap of groups anew if its front moved."""
        group = self._groups[name]
        heapq.heappush(group.line, entry)
        if group.line[0] is entry:
            self._push(name, group)

    def _leave_group_line(self, task_id: str, name: str) -> None:
        """An AVAILABLE task leaves its group's line without a lease (cancel,
        debounce): O(n)."""
        group = self._groups[name]
        group.line = [entry for entry in group.line if entry[2] != task_id]
        heapq.heapify(group.line)
        self._push(name, group)

    def _free_slot(self, record: Record) -> None:
        """A RESERVED task's lease ends: its group (if any) has a slot free again."""
        name = record[_GROUP]
        if name is not None:
            group = self._groups[name]
            group.running -= 1
            self._push(name, group)

    def _line_fronts(self) -> list[Entry]:
        """The entries at the front of every line, the ungrouped one's and each
        group's (for stats)."""
        heads: list[Entry] = []
        if self._line:
            head = self._line_head()
            heads.append((*self._place(head), head))
        heads.extend(g.line[0] for g in self._groups.values() if g.line)
        return heads


class _Group:
    """A group's line of AVAILABLE tasks (a heap of (line key, counter, id)), its leases now,
    the earliest time of its next start (tat), the token of its latest lease
    (turn), and its limits as they apply (cap: the most leases at once; spacing:
    seconds between starts, None for no rate)."""

    __slots__ = ("cap", "line", "running", "spacing", "tat", "turn")

    def __init__(self, limit: Limit) -> None:
        self.line: list[Entry] = []
        self.running = 0
        self.tat: Number = 0
        self.turn = 0
        self.cap, self.spacing = _applied(limit)

    def order(self, fair: bool) -> tuple[Number, ...]:
        """Its place among the groups that may start a task: the front of its line
        (line key, counter), or (round robin) its latest lease's token, then the front."""
        key, counter, _ = self.line[0]
        return (self.turn, key, counter) if fair else (key, counter)


#: The limits of a group nobody limited.
_NO_LIMIT: Final = Limit()


def _applied(limit: Limit) -> tuple[float, float | None]:
    """(cap, spacing) of a group under ``limit``."""
    cap = math.inf if limit.concurrency is None else limit.concurrency
    spacing = None if limit.rate is None or limit.per is None else limit.per / limit.rate
    return cap, spacing


def _stored(retry: Retry) -> Retry | None:
    """A retry policy as a record keeps it: None for immediate (no delay to draw)."""
    return None if retry.kind == "immediate" else retry


def _kill(record: Record, now: Number, error: str | None) -> None:
    """A RESERVED task goes DEAD at once, all its attempts used."""
    record[_ATTEMPTS] = record[_MAX_ATTEMPTS]
    _finish(record, _DEAD, now, error)


def _finish(record: Record, state: str, now: Number, error: str | None) -> None:
    """The task ends in ``state`` (one of contract.FINISHED) at ``now``."""
    record[_STATE] = state
    record[_ERROR] = error
    record[_UPDATED] = record[_FINISHED] = now
