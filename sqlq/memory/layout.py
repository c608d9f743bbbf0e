"""WorkQueue's data: a task's record, a group's, and the structures that hold them.

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
  the idle groups (see sqlq.contract), and a task of one makes it anew.
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

import math
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from ..contract import FINISHED, Limit, Number, State
from ..retry import Retry

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


class Fields:
    """The structures every part of WorkQueue shares (declared here for the type
    checker; WorkQueue.__init__ makes them).  See the module docstring."""

    if TYPE_CHECKING:  # (annotations only: nothing at run time, nothing documented twice)
        lease_seconds: Number
        max_attempts: int
        aging: float
        fair: bool
        retry: Retry
        _retry: Retry | None
        max_payload_bytes: int
        _rng: Any
        _tasks: dict[str, Record]
        _line: deque[str]
        _line_priority: int
        _others: dict[int, deque[str]]
        _fronts: list[tuple[Number, int, int]]
        _leases: deque[Entry]
        _extended: list[Entry]
        _waiting: list[Entry]
        _counter: int
        _now: Number
        _due: Number
        _schedules: dict[str, Number]
        _paused: bool
        _plain: bool
        _results: dict[str, str]
        _progress: dict[str, tuple[float | None, str | None]]
        _keys: dict[str, list[str]]
        _key_of: dict[str, str]
        _groups: dict[str, _Group]
        _limits: dict[str, Limit]
        _ready: list[tuple[Any, ...]]
