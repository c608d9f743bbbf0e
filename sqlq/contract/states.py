"""The contract's terms: the states, what cancel answers, the documented limits, and
the shapes both faces pass around (a time, a completion, an outcome, a group's limits)."""

from __future__ import annotations

from enum import StrEnum
from typing import Final, NamedTuple

from ..number import Number as Number


class State(StrEnum):
    """A task's state; the value is what the database stores and ``status`` returns."""

    WAITING = "WAITING"
    AVAILABLE = "AVAILABLE"
    RESERVED = "RESERVED"
    COMPLETED = "COMPLETED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"


#: The states a task ends in: finished_at is set exactly in these, and only purge
#: removes a task from them (redrive takes DEAD ones back).
FINISHED: Final = (State.COMPLETED, State.DEAD, State.CANCELLED)


class Cancel(StrEnum):
    """What ``cancel`` did (it returns None when it did nothing)."""

    #: The task had not started (AVAILABLE or WAITING): it is CANCELLED now.
    CANCELLED = "CANCELLED"
    #: The task runs (RESERVED): its worker is asked to stop (see sqlq.contract).
    STOPPING = "STOPPING"


# --- documented limits -----------------------------------------------------------

#: Largest accepted time, in seconds (about the year 33658 as a Unix time).
MAX_TIME: Final = 10**12
#: Largest accepted lease, in seconds.
MAX_LEASE_SECONDS: Final = 10**9
#: Largest accepted max_attempts.
MAX_ATTEMPTS: Final = 10**6
#: Longest accepted task id or queue name, in characters.
MAX_ID_LENGTH: Final = 1024
#: Longest stored id (of a task added), queue name, task name, dedupe key or group, in
#: bytes of UTF-8 (ASCII: the same as MAX_ID_LENGTH).  PostgreSQL's indexes hold an
#: entry of at most 2,704 bytes, and the unique ones pair a queue name with an id or a
#: key: wider text in a wide alphabet would be refused by one backend and not another.
MAX_ID_BYTES: Final = 1024
#: The range of priorities (higher first); 0 by default.
MIN_PRIORITY: Final = -1000
MAX_PRIORITY: Final = 1000
#: add's default priority.  Queue.add's fast path compares a priority with it by ``is``,
#: which only the int 0 passes (CPython and PyPy have one 0): not False nor 0.0, which
#: check_priority judges on the path that checks the rare options.  (WorkQueue.add
#: takes that path whenever an option is given.)
NO_PRIORITY: Final = 0
#: Seconds of waiting that one step of priority is worth (see sqlq.contract).
DEFAULT_AGING: Final = 60.0
#: The aging of strict priorities (``aging=None``): a step of priority outweighs
#: any wait, being more than any two accepted times are apart (MAX_TIME would tie
#: a task of priority 1 added at MAX_TIME with one of priority 0 added at 0, and
#: the tie goes to the older).  Line keys stay within 2.1e15: whole seconds exact.
STRICT_AGING: Final = 2.0 * MAX_TIME


#: Longest error text kept with a task; longer texts are cut.
MAX_ERROR_LENGTH: Final = 4000


#: Most tasks one batch call (add_many, claim_many) takes.
MAX_BATCH: Final = 10_000


#: The error recorded when a lease runs out.
LEASE_EXPIRED: Final = "lease expired"


#: Tokens are SQLite integers: 1 to 2**63 - 1.
MAX_TOKEN: Final = 2**63 - 1


#: What check_start answers for a task that may run at once (no delay, no run_at).
NO_START: Final[tuple[None, None]] = (None, None)


#: A completion as the faces store it: (task id, token, the result's stored form).
Completion = tuple[str, int, str | None]


#: A task as ``result`` reads it: (state, stored result, last error).
Outcome = tuple[str, str | None, str | None]


class Limit(NamedTuple):
    """The limits of a group (see ``Queue.set_limit``); None: no such limit."""

    #: At most this many leases of the group at once.
    concurrency: int | None = None
    #: At most ``rate`` starts (claims) per ``per`` seconds, spaced ``per / rate`` apart.
    rate: int | None = None
    per: float | None = None


#: The most leases or starts per period a limit may name.
MAX_LIMIT: Final = 2**31 - 1
