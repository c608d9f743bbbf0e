"""The worker registry: which workers are alive now, what they hold, since when.

A :class:`sqlq.Worker` writes a row of its own (``Queue.beat_worker``: its id, host,
pid, queue, concurrency and the leases it holds, each with the queue's time of its
claim) when it starts and then once per heartbeat interval, idle or busy, and
deletes it when it stops cleanly (``Queue.forget_worker``).  The leases are kept in
the worker's row (JSON text), not in the tasks: a claim writes nothing more.

A row not written again for ``STALE_BEATS`` intervals is **stale**: its worker was
killed (SIGKILL, a lost machine) or is stuck.  Readers (``Queue.workers``, ``sqlq
workers``, the dashboard) show it as such for ``KEEP_STALE`` seconds more and then
no longer; every write of a worker deletes the rows past that (of every queue), so
the table holds the workers alive and those gone within the last KEEP_STALE seconds.
Times are the queue's, as every call's (see Queue), and readers judge staleness
by the queue's time read from the database (its mark, or the database's clock if
later: on PostgreSQL the server's), not by their own clock, which may run ahead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .contract import Number, State, check_task_id, check_time, check_token
from .errors import InvalidArgument, WorkersRunning

if TYPE_CHECKING:  # (the records load where a row is read: `sqlq --help` names KEEP_STALE)
    from .backend import TaskRow, WorkerRow
    from .records import Held, WorkerInfo

    #: A read of a task as last written: (queue, task id) -> the row, or None.
    Find = Callable[[str, str], TaskRow | None]

#: A row is stale once this many of its worker's intervals passed without a write
#: (it missed two: a write that waits for the lock a while is not yet stale).
STALE_BEATS = 3
#: Seconds a stale row is still shown; then the next write of any worker deletes it.
KEEP_STALE = 3600.0


def held_json(holds: Iterable[tuple[str, int, Number]]) -> str:
    """The leases a worker holds, checked, as the registry stores them (JSON text)."""
    try:
        triples = [(task_id, token, since) for task_id, token, since in holds]
    except (TypeError, ValueError):
        raise InvalidArgument(
            "holds must be an iterable of (task id, token, since) triples"
        ) from None
    return json.dumps(
        [
            [check_task_id(task_id), check_token(token), check_time(since, "since")]
            for task_id, token, since in triples
        ]
    )


def listed(rows: Iterable[WorkerRow], now: Number, find: Find | None = None) -> list[WorkerInfo]:
    """The workers to show at ``now`` (those not stale for KEEP_STALE), by queue, host
    and pid.  With ``find`` (a backend's read of a task as last written), a stale
    row's leases say what is still true of their tasks (see Held): one read per
    lease of a stale row, none for a live one."""
    shown = sorted(
        (row for row in rows if now - KEEP_STALE <= row.stale_at),
        key=lambda row: (row.queue, row.host, row.pid),
    )
    return [_info(row, now, find) for row in shown]


def _info(row: WorkerRow, now: Number, find: Find | None) -> WorkerInfo:
    from .records import Held, WorkerInfo

    holds = tuple(Held(*held) for held in json.loads(row.holds))
    stale = now >= row.stale_at
    if stale and find is not None:
        holds = tuple(_checked(held, find(row.queue, held.task_id), now) for held in holds)
    return WorkerInfo(*row[:-1], stale, holds)  # (the columns, then what they tell)


def _checked(held: Held, task: TaskRow | None, now: Number) -> Held:
    """A stale row's lease, with what is true of its task now (see Held)."""
    if task is None:
        return held._replace(now="gone")
    state = str(task.state)
    if state == State.RESERVED and task.token == held.token:
        ran_out = task.deadline is not None and task.deadline <= now
        what = "ran out" if ran_out else "held"
    else:
        what = "moved on"
    return held._replace(now=what, state=state, token_now=task.token)


def held_text(held: Held | Mapping[str, Any]) -> str:
    """What a stale row's lease shows of its task now (`sqlq workers`, the dashboard,
    which has it as JSON): '' for a live row's."""
    from .records import Held

    if not isinstance(held, Held):
        held = Held(**held)
    if held.now is None:
        return ""
    if held.now == "held":
        return "still its lease"
    if held.now == "ran out":
        return "its lease ran out; the next claim takes the task back"
    if held.now == "gone":
        return "the task is gone"
    if held.state == State.RESERVED:
        return f"now RESERVED by token {held.token_now}"
    return f"now {held.state}"


def versioned(row: WorkerRow, schema_version: int) -> dict[str, Any]:
    """The parameters of beat_worker: the row, with the schema version and the sqlq
    version the worker's process knows (a migration refuses to run under live workers
    of an older schema: refuse_older_workers)."""
    from .version import __version__

    return {**row._asdict(), "schema_version": schema_version, "sqlq_version": __version__}


def refuse_older_workers(
    name: str, rows: list[tuple[str, int, str, int]], found: int, latest: int
) -> None:
    """Before migrating the database ``name`` from ``found`` to ``latest``: WorkersRunning
    if ``rows`` (host, pid, sqlq version, schema version: the live workers of an older
    schema) has any.  They would go on under rules they do not know (pauses, limits)."""
    if not rows:
        return
    shown = ", ".join(
        f"{host} pid {pid} ({f'sqlq {version}, schema {schema}' if version else 'an older sqlq'})"
        for host, pid, version, schema in rows[:10]
    )
    more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
    raise WorkersRunning(
        f"{name}: not migrating from schema version {found} to {latest}: the worker registry "
        f"shows {len(rows)} live worker(s) of an older sqlq that would go on under rules they "
        f"do not know: {shown}{more}; stop them first (or migrate anyway with "
        "`sqlq migrate --force`, force_migration=True)",
        [tuple(row) for row in rows],  # type: ignore[misc]
    )
