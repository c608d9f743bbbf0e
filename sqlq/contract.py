"""What both faces of the queue agree on: states, transitions, limits, input checks.

A task is in exactly one of six states::

    add(delay) ──> WAITING ──(run_at reached)──┐
                      ^                        v
    add ─────────────────────────────────> AVAILABLE ──reserve──> RESERVED ──complete──> COMPLETED
                      │                        ^                      │
                      └── (retry delay > 0) ───┴── fail / expiry ─────┤ attempts < max_attempts
                                                                      └──> DEAD (all used)

``reserve`` (or ``claim``) counts one attempt.  A lease that runs out is handled
exactly like ``fail``.  ``redrive`` sends DEAD tasks back to the line with their
attempts reset; ``release`` gives a lease back without counting its attempt.
Nothing else leaves COMPLETED or DEAD.  Without delays and retry backoff no task
is ever WAITING, without ``cancel`` none is CANCELLED, and the four states of the
core contract are all there is.

Cancel and pause (see ``Queue.cancel``, ``Queue.pause``):

* ``cancel`` of an AVAILABLE or WAITING task ends it CANCELLED at once, a third
  finished state (finished_at set, attempts as they were; nothing leaves it but
  ``purge``).  ``cancel`` of a RESERVED task whose lease runs records a *stop
  request* and changes nothing else: its worker learns it at its next heartbeat
  (``heartbeat`` says so), and the task runs no more.  Its lease ends COMPLETED
  if its worker completes it (the work was done), and CANCELLED however else it
  ends: a failure (with or without retry), the lease running out, a release.
  The attempt counts.  ``cancel`` of anything else changes nothing.
* A paused queue hands out no lease (``reserve``, ``claim``, ``claim_many``
  find nothing and ``ready`` says False) until ``resume``; everything else
  works as before: adds, and the leases already out (complete, fail, extend,
  expiries, wake-ups).

Priorities (``add(..., priority=p)``, an int from MIN_PRIORITY to MAX_PRIORITY,
0 by default; see ``sqlq.rules.line_key``): a claim takes the AVAILABLE task with the
lowest *line key*, then the one that joined the line first.  A task's line key
is the time it joined the line (the time of the call that made it AVAILABLE:
its add, release, fail or redrive, or the first call after its wake-up or its
lease's expiry) minus ``p * aging`` seconds, ``aging`` (DEFAULT_AGING; positive)
being the option of the queue that added it (stored with the task, as its
max_attempts and retry policy, so whichever process retries or wakes it later
places it the same way): it is ordered as if it had joined ``p * aging``
seconds earlier (tasks of priority 0 at the time they joined, whatever the
aging).  So within one priority the line is FIFO, a task goes before
every task of a lower priority that joined less than ``Δp * aging`` seconds
before it, and a task waits for a higher-priority task that joins at most
``Δp * aging`` seconds after it, never for later ones: no priority starves.
With ``aging=None`` priorities are strict: aging is STRICT_AGING, more than any
two times differ, so a lower priority waits while any higher one is AVAILABLE.
One priority (all 0, the default) is the FIFO line of the core contract.

Per-key limits (see ``Queue.set_limit``): a task added with a group holds a slot
of it from its claim until its lease ends, however it ends (complete, fail,
release, cancel, expiry); a claim takes a grouped task only while its group has
fewer leases than its concurrency limit and its rate allows a start at the
call's time (starts ``per / rate`` apart).  Among the tasks it may take, a claim
takes the first in line (the lowest line key, see Priorities above), or
with ``fair`` the front of the group whose latest claim is the oldest, unless the
front of the ungrouped line comes before it.  Limits change no state: a task a
limit holds back stays AVAILABLE.  A change of limits never delays a group's next
start: a shorter spacing (or none, its rate removed) moves it back to the last
start plus the new spacing; a longer one applies from the next start on.  How a
database keeps the groups is its own and answers nothing differently: SQLite makes
its group triggers by a recorded on-demand migration at the first grouped add;
PostgreSQL has every call that moves tasks of a queue with grouped tasks, other
than a claim, take the queue's turn first, so that such calls never deadlock (a
claim never waits for a lock).

Idle groups are forgotten (so that a queue grouped per user does not keep a group
per user ever seen): ``purge`` also forgets every group of the queue that is idle
at the call's time, that is with no unfinished task (none WAITING, AVAILABLE or
RESERVED: no lease, nothing counted) and whose next start its rate allows is not
after the call's time.  A group's limits are not the group's: they are kept by
name (set_limit's, and the queue's default), and the next task of a forgotten
group, added or redriven, makes the group anew with them, as its first add did.
So forgetting never lets a group start sooner than its rate allows nor hold more
leases than its limit.  The one thing it changes is the round robin: a group that
comes back starts as a new group, with no latest claim, so a ``fair`` claim serves
it before the groups it has served since (as it would a group never seen); a group
not forgotten keeps its place, the time of its latest claim.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Final, NamedTuple

from . import payload as payloads
from .errors import (
    InvalidArgument,
    InvalidConfig,
    InvalidPayload,
    InvalidTaskId,
    InvalidTime,
    NoResult,
    PayloadTooLarge,
    TaskDead,
)
from .retry import Retry


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
    #: The task runs (RESERVED): its worker is asked to stop (see the module docstring).
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
#: Seconds of waiting that one step of priority is worth (see the module docstring).
DEFAULT_AGING: Final = 60.0
#: The aging of strict priorities (``aging=None``): a step of priority outweighs
#: any wait, being more than any two accepted times are apart (MAX_TIME would tie
#: a task of priority 1 added at MAX_TIME with one of priority 0 added at 0, and
#: the tie goes to the older).  Line keys stay within 2.1e15: whole seconds exact.
STRICT_AGING: Final = 2.0 * MAX_TIME

Number = int | float


def check_time(now: object, what: str = "now") -> Number:
    """Return ``now`` if it is a finite number in [0, MAX_TIME], else raise InvalidTime."""
    if (type(now) is int or type(now) is float) and 0 <= now <= MAX_TIME:
        return now
    # bool is an int subclass, but True is not a time.
    if type(now) is int or type(now) is float:
        value = now
    elif isinstance(now, int | float) and not isinstance(now, bool):
        value = int(now) if isinstance(now, int) else float(now)
    else:
        raise InvalidTime(f"{what} must be an int or float, not {type(now).__name__}{_hint(what)}")
    if not (0 <= value <= MAX_TIME):  # also rejects NaN
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidTime(f"{what} must be a finite number, got {value!r}")
        raise InvalidTime(f"{what} must be between 0 and {MAX_TIME}, got {value!r}")
    return value


def _hint(what: str) -> str:
    """For ``now``: it comes right after the task id (and token), so a payload or an
    error given there by position lands in it."""
    if what != "now":
        return ""
    return (
        "; was it meant as another argument? Pass the others by keyword: "
        "add(task_id, payload=...), fail(task_id, error=...)"
    )


def check_task_id(task_id: object) -> str:
    """Return ``task_id`` if it is a usable id, else raise InvalidTaskId.

    Any non-empty string of Unicode scalar values up to MAX_ID_LENGTH characters is
    an ordinary id: quotes, semicolons and SQL keywords included.  Lone surrogates
    (which no encoding can store) are refused.
    """
    if type(task_id) is str and 0 < len(task_id) <= MAX_ID_LENGTH and task_id.isascii():
        return task_id
    if type(task_id) is not str:
        if not isinstance(task_id, str):
            raise InvalidTaskId(f"task id must be a str, not {type(task_id).__name__}")
        task_id = str(task_id)
    _check_text(task_id, "task id", InvalidTaskId)
    return task_id


def check_new_task_id(task_id: object) -> str:
    """``check_task_id`` for the id of a task being added: also at most MAX_ID_BYTES in
    UTF-8.  (Other calls take any id check_task_id takes, so that a task added before
    this limit, by a SQLite file's older sqlq, can still be completed.)"""
    if type(task_id) is str and 0 < len(task_id) <= MAX_ID_LENGTH and task_id.isascii():
        return task_id
    task_id = check_task_id(task_id)
    _check_bytes(len(task_id.encode("utf-8")), "task id", InvalidTaskId)
    return task_id


def check_queue_name(name: object) -> str:
    """Return ``name`` if it is a usable queue name."""
    return check_name(name, "queue name", InvalidConfig)


def check_task_name(name: object, error: type[Exception] = InvalidArgument) -> str | None:
    """Return ``name`` if it is None (no name) or a usable task name."""
    return None if name is None else check_name(name, "task name", error)


def check_name(name: object, what: str, error: type[Exception], *, indexed: bool = True) -> str:
    """Return ``name`` if it is a usable name (of a queue, of a task): a task id
    without NUL (which SQLite's text functions, and so the schema's checks, take
    as the end), and if ``indexed`` (what an index holds), at most MAX_ID_BYTES."""
    if not isinstance(name, str):
        raise error(f"{what} must be a str, not {type(name).__name__}")
    size = _check_text(name, what, error)
    if indexed:
        _check_bytes(size, what, error)
    if "\x00" in name:
        raise error(f"{what} must not contain NUL ('\\x00')")
    return name


def _check_text(value: str, what: str, error: type[Exception]) -> int:
    """Check ``value``'s characters; return its size in UTF-8."""
    if not value:
        raise error(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise error(f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if value.isascii():
        return len(value)
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise error(f"{what} contains a lone surrogate and cannot be stored") from None


def _check_bytes(size: int, what: str, error: type[Exception]) -> None:
    if size > MAX_ID_BYTES:
        raise error(f"{what} is {size} bytes in UTF-8; the limit is {MAX_ID_BYTES}")


def check_settings(lease_seconds: object, max_attempts: object) -> tuple[Number, int]:
    """Validate the two queue settings; return them."""
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int | float):
        raise InvalidConfig(
            f"lease_seconds must be an int or float, not {type(lease_seconds).__name__}"
        )
    if not (0 <= lease_seconds <= MAX_LEASE_SECONDS):
        raise InvalidConfig(
            f"lease_seconds must be a finite number between 0 and {MAX_LEASE_SECONDS}, "
            f"got {lease_seconds!r}"
        )
    return lease_seconds, check_max_attempts(max_attempts)


def check_priority(priority: object, error: type[Exception] = InvalidArgument) -> int:
    """A task's priority: an int (not a bool) from MIN_PRIORITY to MAX_PRIORITY."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise error(f"priority must be an int, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise error(f"priority must be between {MIN_PRIORITY} and {MAX_PRIORITY}, got {priority!r}")
    return int(priority)


def check_aging(aging: object) -> float:
    """A queue's aging: seconds of waiting worth one step of priority, a number in
    (0, MAX_LEASE_SECONDS]; None for strict priorities (STRICT_AGING)."""
    if aging is None:
        return STRICT_AGING
    if isinstance(aging, bool) or not isinstance(aging, int | float):
        raise InvalidConfig(
            f"aging must be a number of seconds, or None for strict priorities; "
            f"not {type(aging).__name__}"
        )
    if not 0 < aging <= MAX_LEASE_SECONDS:  # also rejects NaN
        raise InvalidConfig(
            f"aging must be a number of seconds in (0, {MAX_LEASE_SECONDS}], "
            f"or None for strict priorities; got {aging!r}"
        )
    return float(aging)


def check_max_attempts(max_attempts: object) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise InvalidConfig(f"max_attempts must be an int, not {type(max_attempts).__name__}")
    if not (1 <= max_attempts <= MAX_ATTEMPTS):
        raise InvalidConfig(
            f"max_attempts must be between 1 and {MAX_ATTEMPTS}, got {max_attempts!r}"
        )
    return int(max_attempts)


#: Longest error text kept with a task; longer texts are cut.
MAX_ERROR_LENGTH: Final = 4000
#: Most tasks one batch call (add_many, claim_many) takes.
MAX_BATCH: Final = 10_000
#: The error recorded when a lease runs out.
LEASE_EXPIRED: Final = "lease expired"


def check_error(error: object) -> str | None:
    """The text to record for a failure: a str, or an exception as 'Type: message'."""
    if error is None:
        return None
    if isinstance(error, BaseException):
        error = describe_error(error)
    if not isinstance(error, str):
        raise InvalidArgument(f"error must be a str or an exception, not {type(error).__name__}")
    return _fit(error)


def _fit(text: str) -> str:
    """An error text as stored: cut at MAX_ERROR_LENGTH, lone surrogates replaced."""
    if len(text) > MAX_ERROR_LENGTH:
        text = text[: MAX_ERROR_LENGTH - 1] + "…"
    return text.encode("utf-8", "replace").decode("utf-8")


def undecodable_error(exc: Exception) -> str:
    """The last error of a task whose stored payload cannot be decoded.

    ``claim`` never hands such a task out and never stops at it: in the same
    call the task goes to DEAD (all its attempts used) with this error, and the
    claim takes the next task.  ``redrive`` sends it back once it can be read.
    ``reserve``, which hands out only the id, does not read the payload.
    """
    return _fit(f"payload cannot be decoded: {exc}")


def describe_error(exc: BaseException) -> str:
    """'Type: message' of an exception, as sqlq stores and shows it: the one way sqlq
    formats what a handler raised (stored as a task's error, logged, traced).  Never
    raises, whatever the exception's ``__str__``, ``__repr__`` or ``__class__`` do
    (raise, even SystemExit; return something else than a str; a huge text): the
    type is ``type(exc)``'s name, the message ``<str() raised ...>`` if str() fails,
    and the text is cut at MAX_ERROR_LENGTH."""
    try:
        name = type(exc).__name__
        name = name if type(name) is str else "?"
    except BaseException:  # a metaclass's __name__ that raises
        name = "?"
    message, _ = _message(exc)
    return _fit(f"{name}: {message}")


def error_message(exc: BaseException) -> str:
    """``str(exc)`` cut as describe_error cuts it, without the type; describe_error's
    whole text if str() fails.  Never raises."""
    message, printable = _message(exc)
    return _fit(message) if printable else describe_error(exc)


def _message(exc: BaseException) -> tuple[str, bool]:
    """(``str(exc)`` as a plain str cut past MAX_ERROR_LENGTH, True), or (what
    str() raised, False)."""
    try:
        text = str(exc)
        if not isinstance(text, str):  # (str() refuses a non-str; be sure anyway)
            raise TypeError("__str__ returned non-string")
    except BaseException as failure:
        return f"<str() raised {type(failure).__name__}>", False
    return str.__str__(text)[: MAX_ERROR_LENGTH + 1], True  # (a plain str, not a subclass)


#: Tokens are SQLite integers: 1 to 2**63 - 1.
MAX_TOKEN: Final = 2**63 - 1


def check_token(token: object) -> int:
    if type(token) is int and 0 < token <= MAX_TOKEN:  # the usual case, at once
        return token
    if isinstance(token, bool) or not isinstance(token, int) or not 1 <= token <= MAX_TOKEN:
        raise InvalidArgument(f"a lease token is an int from 1 to 2**63 - 1, not {token!r}")
    return token


def time_after(now: Number, seconds: Number) -> Number:
    """``now + seconds`` (a lease's end, a delay's), never past MAX_TIME: every
    time stored stays within the limits, and a call at MAX_TIME still reaches it."""
    end = now + seconds
    return end if end <= MAX_TIME else MAX_TIME


def check_seconds(seconds: object, what: str) -> Number:
    """A duration (delay, extension, age): a finite number from 0 to MAX_LEASE_SECONDS."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    if not 0 <= seconds <= MAX_LEASE_SECONDS:
        raise InvalidArgument(
            f"{what} must be between 0 and {MAX_LEASE_SECONDS} seconds, got {seconds!r}"
        )
    return seconds


def check_count(n: object, what: str, limit: int = MAX_BATCH, least: int = 1) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not least <= n <= limit:
        raise InvalidArgument(f"{what} must be an int from {least} to {limit}, got {n!r}")
    return n


def check_states(states: object, allowed: tuple[State, ...]) -> tuple[State, ...]:
    if isinstance(states, str):
        states = (states,)
    try:
        found = tuple(State(s) for s in states)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise InvalidArgument(f"states must be some of {[s.value for s in allowed]}") from None
    if not found or any(s not in allowed for s in found):
        raise InvalidArgument(f"states must be some of {[s.value for s in allowed]}")
    return found


#: What check_start answers for a task that may run at once (no delay, no run_at).
NO_START: Final[tuple[None, None]] = (None, None)


def check_start(delay: object, run_at: object) -> tuple[Number | None, Number | None]:
    """Validate when a new task may first run: after ``delay`` seconds, or at ``run_at``
    (NO_START itself if neither is given)."""
    if delay is None and run_at is None:
        return NO_START
    if delay is not None and run_at is not None:
        raise InvalidArgument("give delay or run_at, not both")
    return (
        None if delay is None else check_seconds(delay, "delay"),
        None if run_at is None else check_time(run_at, "run_at"),
    )


def first_run(now: Number, start: tuple[Number | None, Number | None]) -> Number:
    """When a task added at ``now`` may first run; later than ``now`` means WAITING."""
    delay, run_at = start
    if run_at is not None:
        return run_at
    return now if delay is None else time_after(now, delay)


def check_task_ids(task_ids: object) -> list[str] | None:
    """The ids of a call that takes some ids or None (all); a str is one id, not a list."""
    if task_ids is None:
        return None
    if isinstance(task_ids, str | bytes) or not hasattr(task_ids, "__iter__"):
        raise InvalidArgument(
            f"task_ids must be an iterable of task ids, not {type(task_ids).__name__}"
        )
    return [check_task_id(task_id) for task_id in task_ids]


def check_rng(rng: object) -> Any:
    """A random number generator for retry jitter: a random.Random, or anything
    with its ``uniform(a, b)``."""
    if rng is None:
        return random.Random()
    if not callable(getattr(rng, "uniform", None)):
        raise InvalidConfig(f"rng must be a random.Random, not {type(rng).__name__}")
    return rng


def check_retry(retry: object) -> Retry:
    if retry is None:
        return Retry()
    if not isinstance(retry, Retry):
        raise InvalidConfig(f"retry must be a sqlq.Retry, not {type(retry).__name__}")
    return retry


def check_batch(
    items: Iterable[str | tuple[str, Any] | tuple[str, Any, str | None]], max_payload_bytes: int
) -> list[tuple[str, payloads.Encoded, str | None]]:
    """Validate a whole batch (ids, (id, payload) pairs or (id, payload, task name)
    triples) before anything is written."""
    if isinstance(items, str | bytes):
        raise InvalidArgument("add_many takes an iterable of ids or (id, payload) pairs")
    batch: list[tuple[str, payloads.Encoded, str | None]] = []
    append = batch.append
    for item in items:
        if type(item) is str and 0 < len(item) <= MAX_ID_LENGTH and item.isascii():
            append((item, None, None))  # a plain id: what check_task_id would return
        else:
            name = None
            if isinstance(item, tuple):
                if len(item) == 3:
                    task_id, payload, name = item
                elif len(item) == 2:
                    task_id, payload = item
                else:
                    raise InvalidArgument(
                        "a batch item is an id, an (id, payload) pair or an "
                        "(id, payload, task name) triple"
                    )
            else:
                task_id, payload = item, None
            append(
                (
                    check_new_task_id(task_id),
                    payloads.encode(payload, max_payload_bytes),
                    check_task_name(name),
                )
            )
        if len(batch) > MAX_BATCH:
            raise InvalidArgument(f"a batch holds at most {MAX_BATCH} tasks")
    return batch


#: A completion as the faces store it: (task id, token, the result's stored form).
Completion = tuple[str, int, str | None]


def check_leases(leases: object, limit: int, what: str = "complete_many") -> list[Completion]:
    """(task id, token, stored result) from Leases, (task id, token) pairs or (task id,
    token, result) triples, all checked before anything is written; ``limit`` is the
    queue's max_payload_bytes, which results share (see check_result)."""
    from .records import Lease

    wrong = f"{what} takes Leases, (task id, token) pairs or (task id, token, result) triples"
    items = []
    for item in _iterable(leases, wrong):
        result = None
        if isinstance(item, Lease):
            task_id, token = item.task_id, item.token
        elif isinstance(item, tuple) and len(item) == 2:
            task_id, token = item
        elif isinstance(item, tuple) and len(item) == 3:
            task_id, token, result = item
        else:
            raise InvalidArgument(wrong)
        task_id, token = check_task_id(task_id), check_token(token)
        items.append((task_id, token, None if result is None else check_result(result, limit)))
        _check_size(items)
    return items


# --- results and progress ----------------------------------------------------------
#
# A task's result is what ``complete(..., result=value)`` stores with it: a JSON
# value under the payload's rules (sqlq.payload: never pickled) and within the
# queue's max_payload_bytes; bytes are refused (a result is for reading back
# anywhere, ``sqlq show --json`` included).  None stores nothing, so a result of
# None and no result read back alike.  The result is written by the completion
# itself (a retried completion keeps the first one), kept while the task is kept
# (``purge`` removes it with the task), and read by ``result(task_id)``: the value
# of a COMPLETED task; NoResult for an unknown id or a task not COMPLETED yet,
# TaskDead (a NoResult, with the last error) for a DEAD one.
#
# Progress is what a lease's holder reports while it works: a finite number on a
# scale of its own (a fraction, a count) and/or a message (a name's rules: up to
# MAX_ID_LENGTH characters, no NUL), each None to clear it.
# Like ``extend`` it is a compare-and-set on the current lease: a holder whose
# lease ran out, ended or passed to another worker is refused (False).  The latest
# report stays with the task, whatever happens to the task afterwards, until
# another lease reports (a retry shows the last attempt's progress until then).


def check_result(result: object, limit: int) -> str | None:
    """The stored form of a task's result: JSON text, or None for None."""
    if result is None:
        return None
    if isinstance(result, bytes | bytearray | memoryview):
        raise InvalidPayload("a result must be a JSON value; bytes are for payloads only")
    try:
        return payloads.encode(result, limit)  # type: ignore[return-value]  # (never bytes)
    except (InvalidPayload, PayloadTooLarge) as exc:
        raise type(exc)(f"the result cannot be stored: {exc}") from None


def check_progress(value: object, message: object) -> tuple[float | None, str | None]:
    """A progress report: a finite number or None, and a message or None."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgument(f"progress must be a number or None, not {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value):
            raise InvalidArgument(f"progress must be a finite number, got {value!r}")
    if message is not None and message != "":
        message = check_name(message, "progress message", InvalidArgument, indexed=False)
    return value, message


#: A task as ``result`` reads it: (state, stored result, last error).
Outcome = tuple[str, str | None, str | None]


def result_of(task_id: str, found: Outcome | None) -> Any:
    """What ``result`` answers for a task found as (state, stored result, last error),
    or None if the id is unknown; see the section's comment."""
    if found is None:
        raise NoResult(f"no task {task_id!r} in this queue", task_id, None)
    state, stored, error = found
    if state == State.COMPLETED:
        return payloads.decode(stored)
    if state == State.DEAD:
        raise TaskDead(f"task {task_id!r} is DEAD: {error}", task_id, error)
    raise NoResult(f"task {task_id!r} is {state}, not COMPLETED", task_id, state)


def check_failures(failed: object) -> list[tuple[str, int, str | None, bool]]:
    """(task id, token, error text, retry) from (task id, token, error) triples or
    (task id, token, error, retry) quadruples, all checked before anything is
    written; the error and ``retry`` as ``fail`` takes them."""
    wrong = "failed takes (task id, token, error) triples or (task id, token, error, retry)"
    items = []
    for item in _iterable(failed, wrong):
        if not (isinstance(item, tuple) and len(item) in (3, 4)):
            raise InvalidArgument(wrong)
        task_id, token, error, *retry = item
        items.append(
            (
                check_task_id(task_id),
                check_token(token),
                check_error(error),
                check_flag(retry[0] if retry else True, "retry"),
            )
        )
        _check_size(items)
    return items


def check_flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be True or False, not {value!r}")
    return value


def _iterable(items: object, wrong: str) -> Iterable[object]:
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise InvalidArgument(wrong)
    return items


def _check_size(items: list[Any]) -> None:
    if len(items) > MAX_BATCH:
        raise InvalidArgument(f"a batch holds at most {MAX_BATCH} tasks")


# --- per-key limits (Queue.set_limit) ------------------------------------------------


class Limit(NamedTuple):
    """The limits of a group (see ``Queue.set_limit``); None: no such limit."""

    #: At most this many leases of the group at once.
    concurrency: int | None = None
    #: At most ``rate`` starts (claims) per ``per`` seconds, spaced ``per / rate`` apart.
    rate: int | None = None
    per: float | None = None


#: The most leases or starts per period a limit may name.
MAX_LIMIT: Final = 2**31 - 1


def check_group(group: object) -> str | None:
    """A task's group: None (no group) or a usable name (as a task's name)."""
    return None if group is None else check_name(group, "group", InvalidArgument)


def limit_key(group: object) -> str:
    """How the limits name a group: its name, or '' for the queue's default (None)."""
    return "" if group is None else check_name(group, "group", InvalidArgument)


def check_limit(concurrency: object, rate: object, per: object) -> Limit:
    """The limits of a group: ``concurrency`` leases at once and ``rate`` starts per
    ``per`` seconds (1 if not given), each None for no such limit.  A starts limit
    spaces the starts ``per / rate`` seconds apart, so no span of ``per`` seconds
    holds more than ``rate`` of them."""
    for value, what in ((concurrency, "concurrency"), (rate, "rate")):
        if value is not None:
            check_count(value, what, MAX_LIMIT)
    if rate is None:
        if per is not None:
            raise InvalidArgument("per (seconds) goes with a rate: give rate=starts too")
        return Limit(concurrency, None, None)  # type: ignore[arg-type]
    seconds = 1.0 if per is None else check_seconds(per, "per")
    if not seconds / rate > 0:  # type: ignore[operator]  # (per, or a spacing that rounds to 0)
        raise InvalidArgument(
            "per must be more than 0 seconds, and so must per / rate (the seconds between "
            f"starts): got per={per!r}, rate={rate!r}"
        )
    return Limit(concurrency, rate, float(seconds))  # type: ignore[arg-type]
