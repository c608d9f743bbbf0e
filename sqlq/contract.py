"""What both faces of the queue agree on: states, transitions, limits, input checks.

A task moves through four states::

    add ──> AVAILABLE ──reserve──> RESERVED ──complete──> COMPLETED
                ^                      │
                └──── fail / expiry ───┤ (attempts < max_attempts)
                                       └──> DEAD (attempts == max_attempts)

``reserve`` counts one attempt.  A lease that runs out is handled exactly like
``fail``.  Nothing leaves COMPLETED or DEAD.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Final

from .errors import InvalidConfig, InvalidTaskId, InvalidTime


class State(StrEnum):
    """A task's state; the value is what the database stores and ``status`` returns."""

    AVAILABLE = "AVAILABLE"
    RESERVED = "RESERVED"
    COMPLETED = "COMPLETED"
    DEAD = "DEAD"


def after_failure(attempts: int, max_attempts: int) -> State:
    """The state a RESERVED task moves to when it fails or its lease runs out."""
    return State.AVAILABLE if attempts < max_attempts else State.DEAD


# --- documented limits -----------------------------------------------------------

#: Largest accepted time, in seconds (about the year 33658 as a Unix time).
MAX_TIME: Final = 10**12
#: Largest accepted lease, in seconds.
MAX_LEASE_SECONDS: Final = 10**9
#: Largest accepted max_attempts.
MAX_ATTEMPTS: Final = 10**6
#: Longest accepted task id or queue name, in characters.
MAX_ID_LENGTH: Final = 1024

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
        raise InvalidTime(f"{what} must be an int or float, not {type(now).__name__}")
    if not (0 <= value <= MAX_TIME):  # also rejects NaN
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidTime(f"{what} must be a finite number, got {value!r}")
        raise InvalidTime(f"{what} must be between 0 and {MAX_TIME}, got {value!r}")
    return value


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


def check_queue_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidConfig(f"queue name must be a str, not {type(name).__name__}")
    _check_text(name, "queue name", InvalidConfig)
    return name


def _check_text(value: str, what: str, error: type[Exception]) -> None:
    if not value:
        raise error(f"{what} must not be empty")
    if len(value) > MAX_ID_LENGTH:
        raise error(f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise error(f"{what} contains a lone surrogate and cannot be stored") from None


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
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise InvalidConfig(f"max_attempts must be an int, not {type(max_attempts).__name__}")
    if not (1 <= max_attempts <= MAX_ATTEMPTS):
        raise InvalidConfig(
            f"max_attempts must be between 1 and {MAX_ATTEMPTS}, got {max_attempts!r}"
        )
    return lease_seconds, int(max_attempts)
