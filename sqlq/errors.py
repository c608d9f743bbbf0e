"""The exceptions sqlq raises.

Every error sqlq raises derives from :class:`SqlqError`.  Two families matter to
callers:

* :class:`InvalidArgument` (also a ``ValueError``): the call was refused before
  anything was read or written; the queue is unchanged.
* :class:`StorageError`: the database could not do what was asked.  The
  transaction of the call was rolled back, so the queue is unchanged, and the
  original DB-API exception is kept as ``__cause__``.
"""

from __future__ import annotations


class SqlqError(Exception):
    """Base class of every error raised by sqlq."""


# --- bad input -----------------------------------------------------------------


class InvalidArgument(SqlqError, ValueError):
    """An argument has the wrong type or is outside the documented limits."""


class InvalidTaskId(InvalidArgument):
    """A task id is not a non-empty ``str`` of valid Unicode within the length limit."""


class InvalidTime(InvalidArgument):
    """A time is not a finite number within the documented limits."""


class InvalidPayload(InvalidArgument):
    """A payload is neither JSON-serialisable nor bytes."""


class PayloadTooLarge(InvalidArgument):
    """A payload's encoded size is above the queue's max_payload_bytes."""


class InvalidConfig(InvalidArgument):
    """A queue setting (lease_seconds, max_attempts, queue name, ...) is invalid."""


class NoDatabase(InvalidConfig):
    """No database was given: an empty path or URL (an unset variable, often)."""


class InvalidTask(InvalidArgument, TypeError):
    """A registered task was deferred with arguments its function cannot take, or
    that cannot be stored as JSON; nothing was stored.  Of a batch
    (``Task.defer_many``), ``index`` is the position of the first refused call."""

    #: The position in the batch of the call refused (None: not from a batch).
    index: int | None = None


# --- failures that no retry can mend ---------------------------------------------


class NotRetryable(SqlqError):
    """Raised by a handler (or by a ``sqlq.Tasks`` worker for a task it cannot run:
    an unknown name, arguments that do not fit): the worker fails the task with
    ``retry=False``, so it goes DEAD at once with the message as its last error."""


# --- the database --------------------------------------------------------------


class StorageError(SqlqError):
    """The database failed; the call's transaction did not take effect."""


class Busy(StorageError):
    """The write lock could not be taken within the configured wait (``busy_timeout``)."""


class StorageFull(StorageError):
    """The disk (or the database's size limit) is full."""


class StorageIOError(StorageError):
    """The operating system reported an I/O error while reading or writing the database."""


class Corrupt(StorageError):
    """SQLite reports the database as malformed.  sqlq never repairs or deletes it."""


class CannotOpen(StorageError):
    """The database file (or its folder, or its -wal/-shm files) cannot be opened."""


class Unavailable(StorageError):
    """The database server cannot be reached, or the connection to it was lost (a
    restart, a network failure, a terminated session).  What the call did was not
    committed, unless the connection was lost while the commit itself was under
    way: then it may have been.  The next call connects again."""


class ReadOnly(StorageError):
    """The database cannot be written (permissions, a read-only mount, ...)."""


class SchemaError(StorageError):
    """The file's schema is not one this version of sqlq can use.  The file is left untouched."""


class NotASqlqDatabase(SchemaError):
    """The file is not a SQLite database, or is one that sqlq did not create."""


class SchemaTooNew(SchemaError):
    """The database was migrated by a newer sqlq than this one."""


class SchemaChanged(SchemaError):
    """The database was migrated while this process had it open: its schema is no longer
    the one this process knows, so the call did nothing.  Stop, and start again (with a
    sqlq that knows the new schema)."""


class WorkersRunning(SchemaError):
    """A migration was refused: the worker registry shows live workers whose sqlq knows
    an older schema (they would go on under rules they do not know).  Stop them first,
    or migrate with ``force`` (``sqlq migrate --force``).  ``workers`` lists them as
    (host, pid, sqlq version, schema version)."""

    def __init__(self, message: str, workers: list[tuple[str, int, str, int]]) -> None:
        super().__init__(message)
        self.workers = workers


class ClockSkew(SqlqError):
    """This process's clock disagrees with the operating system's by more than
    ``max_clock_step``; the call was refused so that the queue's time does not move.

    Raised only for calls that read the default clock (``now`` not given).
    """


class InvariantViolation(SqlqError):
    """A guarded update found the database in a state it should never be in.

    This means a bug or an outside edit of the tables; the call's transaction
    was rolled back.
    """


class QueueClosed(SqlqError):
    """The queue was closed; open a new one."""


class NoResult(SqlqError, LookupError):
    """``result`` of a task that has none: the id is unknown (``state`` None) or the
    task is not COMPLETED (``state`` says what it is)."""

    def __init__(self, message: str, task_id: str, state: str | None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.state = state


class TaskDead(NoResult):
    """``result`` or ``wait_for_result`` of a DEAD task: it will have no result
    unless redriven; ``error`` is its last error."""

    def __init__(self, message: str, task_id: str, error: str | None) -> None:
        super().__init__(message, task_id, "DEAD")
        self.error = error


class ResultTimeout(SqlqError, TimeoutError):
    """``wait_for_result``'s timeout passed before the task was COMPLETED or DEAD;
    ``state`` is what it was at the last look (None: unknown id)."""

    def __init__(self, message: str, task_id: str, state: str | None) -> None:
        super().__init__(message)
        self.task_id = task_id
        self.state = state


#: Errors a long-running caller (a worker) outlives: each left the queue unchanged (but
#: see Unavailable), and a taken lock, a full disk, a failing write, a lost server or a
#: wrong clock may pass (the lock freed, space freed, the device or the server back, the
#: clock fixed), so the call may be tried again later.
TRANSIENT: tuple[type[SqlqError], ...] = (
    Busy,
    StorageFull,
    StorageIOError,
    Unavailable,
    ClockSkew,
)
