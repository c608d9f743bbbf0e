"""How PostgreSQL's rows hold a task (see sqlq.sqlstore.Rows): a task row (a bytes
payload has a column of its own; ids and errors are stored escaped, see text.py),
what a claim returns, and the parameters of a new task.
"""

from __future__ import annotations

from typing import Any

from ..backend import Claimed, TaskRow
from ..contract import State
from ..payload import Encoded
from ..retry import stored_policy
from ..sqlstore import Adding
from .text import read, read_or_none, stored


def task_row(row: tuple[Any, ...]) -> TaskRow:
    (row_id, task_id, state, attempts, max_attempts, token, seq, kind, base, cap, deadline,
     run_at, payload, payload_bytes, error, created, updated, finished, name,
     stop, result, progress, message, key, priority, group) = row  # fmt: skip
    return TaskRow(
        row_id, read(task_id), State(state), attempts, max_attempts, token, seq,
        stored_policy(kind, base, cap), deadline, run_at,
        payload if payload_bytes is None else payload_bytes, read_or_none(error),
        created, updated, finished, name, stop, result, progress, message, group,
        key, priority,
    )  # fmt: skip


def claimed(row: tuple[Any, ...]) -> Claimed:
    task_id, token, attempts, payload, payload_bytes, name = row
    return read(task_id), token, attempts, payload if payload_bytes is None else payload_bytes, name


def new_task(how: Adding, task_id: str, payload: Encoded, name: str | None) -> dict[str, Any]:
    """The parameters of a new task that insert_task and insert_keyed_task share."""
    queue, max_attempts, retry, run_at, priority, aging, group = how
    return {
        "queue": queue,
        "task_id": stored(task_id),
        "state": "AVAILABLE" if run_at is None else "WAITING",
        "max_attempts": max_attempts,
        "run_at": run_at,
        "payload": payload if isinstance(payload, str) else None,
        "payload_bytes": payload if isinstance(payload, bytes) else None,
        "kind": retry.kind,
        "base": retry.base,
        "cap": retry.cap,
        "name": name,
        "group_key": group,
        "priority": priority,
        "aging": aging,
    }
