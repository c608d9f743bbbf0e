"""Results and progress: what ``complete(..., result=value)`` stores, what
``result`` answers, and the progress a lease's holder reports.

A task's result is what ``complete(..., result=value)`` stores with it: a JSON
value under the payload's rules (sqlq.payload: never pickled) and within the
queue's max_payload_bytes; bytes are refused (a result is for reading back
anywhere, ``sqlq show --json`` included).  None stores nothing, so a result of
None and no result read back alike.  The result is written by the completion
itself (a retried completion keeps the first one), kept while the task is kept
(``purge`` removes it with the task), and read by ``result(task_id)``: the value
of a COMPLETED task; NoResult for an unknown id or a task not COMPLETED yet,
TaskDead (a NoResult, with the last error) for a DEAD one.

Progress is what a lease's holder reports while it works: a finite number on a
scale of its own (a fraction, a count) and/or a message (a name's rules: up to
MAX_ID_LENGTH characters, no NUL), each None to clear it.
Like ``extend`` it is a compare-and-set on the current lease: a holder whose
lease ran out, ended or passed to another worker is refused (False).  The latest
report stays with the task, whatever happens to the task afterwards, until
another lease reports (a retry shows the last attempt's progress until then)."""

from __future__ import annotations

import math
from typing import Any

from .. import payload as payloads
from ..errors import InvalidArgument, InvalidPayload, NoResult, PayloadTooLarge, TaskDead
from .checks import check_name
from .states import Outcome, State


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
