"""The contract's input checks: ids and names, times and durations, settings, counts,
priorities, flags and a group's limits; each returns the value as the queue keeps it
or raises a typed error of sqlq.errors."""

from __future__ import annotations

import math
import random
from typing import Any

from ..errors import InvalidArgument, InvalidConfig, InvalidTaskId, InvalidTime
from ..retry import Retry
from .states import (
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_ID_BYTES,
    MAX_ID_LENGTH,
    MAX_LEASE_SECONDS,
    MAX_LIMIT,
    MAX_PRIORITY,
    MAX_TIME,
    MAX_TOKEN,
    MIN_PRIORITY,
    NO_START,
    STRICT_AGING,
    Limit,
    Number,
    State,
)


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


def check_flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{what} must be True or False, not {value!r}")
    return value


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
