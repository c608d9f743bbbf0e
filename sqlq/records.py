"""What the queue hands out: leases, task details and queue statistics."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .number import Number


@dataclass(frozen=True, init=False)
class Lease:
    """A reservation: the task, its fencing token, and what the worker needs to run it.

    ``token`` is unique and strictly increasing per database (so per queue).
    ``complete``, ``fail``, ``extend`` and ``release`` given the token act only
    while this lease is the task's current one.  ``name`` is the task's name (the
    function of a ``sqlq.Tasks`` registry that runs it), or None.
    """

    task_id: str
    token: int
    attempt: int
    deadline: Number
    payload: Any = None
    name: str | None = None

    def __init__(
        self,
        task_id: str,
        token: int,
        attempt: int,
        deadline: Number,
        payload: Any = None,
        name: str | None = None,
    ) -> None:
        # The frozen dataclass's own __init__, without its object.__setattr__ per field
        # (half the cost of making a lease, and every claim makes one).
        fields = self.__dict__
        fields["task_id"] = task_id
        fields["token"] = token
        fields["attempt"] = attempt
        fields["deadline"] = deadline
        fields["payload"] = payload
        fields["name"] = name


class Heartbeat(NamedTuple):
    """What ``heartbeat`` answers for a lease it extended."""

    #: When the lease runs out now.
    deadline: Number
    #: ``cancel`` asked the task to stop: its handler should end it (see sqlq.contract).
    stop_requested: bool


@dataclass(frozen=True)
class TaskInfo:
    """A task as stored, for inspection (``info``, ``tasks``, ``dead``)."""

    task_id: str
    state: str
    attempts: int
    max_attempts: int
    payload: Any
    last_error: str | None
    #: The latest lease's token (also after it ended), or None if never reserved.
    token: int | None
    #: When the current lease runs out (RESERVED only).
    deadline: Number | None
    #: When the task becomes AVAILABLE (WAITING only).
    run_at: Number | None
    created_at: Number
    updated_at: Number
    #: When it became COMPLETED, DEAD or CANCELLED.
    finished_at: Number | None
    #: The task's name (see ``sqlq.Tasks``), or None.
    name: str | None = None
    #: When ``cancel`` asked it to stop while it ran, or None.
    stop_requested_at: Number | None = None
    #: What its handler returned (``complete(..., result=...)``), or None.
    result: Any = None
    #: The latest progress reported by a lease of the task (``progress``): a
    #: number and a message, each None if not reported.
    progress: float | None = None
    progress_message: str | None = None
    #: The task's group (``add(..., group=...)``), whose limits it obeys, or None.
    group: str | None = None
    #: The task's dedupe key (``add(..., key=...)``, see sqlq.keys), or None.
    key: str | None = None
    #: Its priority (higher first; see sqlq.contract).
    priority: int = 0


class GroupUse(NamedTuple):
    """A group with unfinished tasks, as ``Queue.groups`` reports it."""

    #: Its leases now (RESERVED tasks).
    running: int
    #: Its tasks not finished (WAITING, AVAILABLE or RESERVED).
    unfinished: int


class Purged(int):
    """What ``purge`` returns: the number of tasks it deleted (an int, as it always
    was), and in ``groups`` how many idle groups it forgot (see sqlq.contract, Per-key
    limits: a group with no unfinished task and no start owed to its rate)."""

    groups: int

    def __new__(cls, tasks: int, groups: int = 0) -> Purged:
        purged = super().__new__(cls, tasks)
        purged.groups = groups
        return purged

    def __reduce__(self) -> Any:
        return Purged, (int(self), self.groups)


@dataclass(frozen=True)
class QueueStats:
    """A queue at one moment (after due leases expired and due tasks woke)."""

    counts: dict[str, int]
    #: Seconds the front of the line has been AVAILABLE, or None if nothing is.
    oldest_available_age: Number | None
    #: The soonest lease deadline, or None.
    next_deadline: Number | None
    #: The soonest time a WAITING task becomes AVAILABLE, or None.
    next_run_at: Number | None
    #: The size of the database's -wal file in bytes (None in memory).  Not part of
    #: the comparison of two QueueStats: it is the storage's, not the queue's.
    wal_bytes: int | None = field(default=None, compare=False)
    #: The queue is paused: claims find nothing until it is resumed.
    paused: bool = False

    @property
    def leases(self) -> int:
        """Leases in flight: the RESERVED tasks."""
        return self.counts["RESERVED"]


@dataclass(frozen=True)
class StorageFacts:
    """What a backend tells about its storage; None where it has no such thing."""

    #: The size in bytes of the write-ahead log kept for this database alone (SQLite's
    #: -wal file).
    wal_bytes: int | None = None


@dataclass(frozen=True)
class Checkpoint:
    """The outcome of a checkpoint: the write-ahead log copied into the database file."""

    #: Another connection was checkpointing at the same moment (nothing was wrong).
    busy: bool
    #: Frames in the write-ahead log, and how many of them are in the database file
    #: now; fewer when a reader still needs older pages.
    wal_frames: int
    checkpointed: int
    #: The size of the -wal file afterwards (None if it could not be looked at).
    wal_bytes: int | None


# --- inspection and maintenance (what sqlq's commands ask of a backend) ------------------


@dataclass(frozen=True)
class SchemaVersions:
    """The schema versions of a database, as its backend opened it."""

    #: The version the database was at when it was opened (0: empty, or created then).
    found: int
    #: The version it is at now: ``latest`` once opened to migrate; opened as it is
    #: (``migrate=False``), the version found, which may be older than ``latest``.
    current: int
    #: The newest version this sqlq knows.
    latest: int


@dataclass(frozen=True)
class QueueOverview:
    """One queue of a database as last written (nothing due applied): see
    Backend.overview."""

    #: Tasks per state, the states that have tasks only.
    counts: dict[str, int]
    #: When the front of the line became AVAILABLE, or None if nothing is.
    available_since: Number | None
    #: The soonest lease deadline, or None.
    next_deadline: Number | None
    #: The soonest time a WAITING task becomes AVAILABLE, or None.
    next_run_at: Number | None
    #: Named tasks per name and state (empty unless asked for).
    names: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The queue is paused (see Queue.pause).
    paused: bool = False


@dataclass(frozen=True)
class Compaction:
    """The outcome of Backend.compact: the database's size in bytes before and after."""

    before: int
    after: int


#: When a queue's line front became AVAILABLE, its next deadline, its next run_at.
Fronts = tuple[Number | None, Number | None, Number | None]


def overviews(
    states: Iterable[tuple[str, str, int]],
    names: Iterable[tuple[str, str, str, int]],
    fronts: Callable[[str], Fronts],
    paused: Iterable[str],
) -> dict[str, QueueOverview]:
    """Backend.overview from a backend's rows: (queue, state, count) for every queue
    that has tasks, (queue, name, state, count) for named tasks, each queue's
    fronts, and the paused queues (shown even when they have no tasks)."""
    counts: dict[str, dict[str, int]] = {}
    for queue, state, count in states:
        counts.setdefault(queue, {})[state] = count
    stopped = set(paused)
    for queue in stopped:
        counts.setdefault(queue, {})
    named: dict[str, dict[str, dict[str, int]]] = {}
    for queue, name, state, count in names:
        named.setdefault(queue, {}).setdefault(name, {})[state] = count
    return {
        queue: QueueOverview(
            found, *fronts(queue), names=named.get(queue, {}), paused=queue in stopped
        )
        for queue, found in sorted(counts.items())
    }


class ScheduleState(NamedTuple):
    """A schedule as a database keeps it (see sqlq.schedule): every tick up to
    ``handled_until`` is handled; ``last_enqueued`` is the latest tick a task was
    added for (None before the first); ``spec`` is ``"cron <expression>"`` or
    ``"every <seconds>"``."""

    queue: str
    name: str
    task: str | None
    spec: str
    tz: str
    catch_up: str
    handled_until: Number
    last_enqueued: Number | None
    updated_at: Number


class Held(NamedTuple):
    """A lease a worker holds (see WorkerInfo): since ``since``, the queue's time of
    its claim.

    A stale worker's row (see sqlq.registry) is no longer rewritten, so its leases
    are checked against the tasks when it is read: ``now`` says what is still true,
    ``"held"`` (the task is RESERVED under ``token``: the killed worker's lease, until
    its deadline), ``"ran out"`` (the same, past its deadline: the next claim takes the
    task back), ``"moved on"`` (another lease holds the task, or it left RESERVED:
    ``state`` and ``token_now``, its latest lease's token, say where it is) or
    ``"gone"`` (the task no longer exists).  None for a live worker's leases, which
    its heartbeats rewrite."""

    task_id: str
    token: int
    since: Number
    now: str | None = None
    #: The task's state now, and its latest lease's token (a stale row's only).
    state: str | None = None
    token_now: int | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process as the worker registry shows it (see sqlq.registry)."""

    worker_id: str
    queue: str
    host: str
    pid: int
    #: The tasks it runs at once, at most.
    concurrency: int
    #: The queue's time of its first write, and of its latest (its heartbeat).
    started_at: Number
    beat_at: Number
    #: When it is stale unless it writes again.
    stale_at: Number
    #: True: it missed its writes (killed, its machine lost, or stuck); shown until
    #: sqlq.registry.KEEP_STALE seconds after ``stale_at``.
    stale: bool
    #: The leases it held at its latest write.
    holds: tuple[Held, ...]
