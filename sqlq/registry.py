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
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .contract import Number, check_task_id, check_time, check_token
from .errors import InvalidArgument

if TYPE_CHECKING:
    from .backend import WorkerRow
    from .records import WorkerInfo

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


def listed(rows: Iterable[WorkerRow], now: Number) -> list[WorkerInfo]:
    """The workers to show at ``now`` (those not stale for KEEP_STALE), by queue, host
    and pid."""
    shown = sorted(
        (row for row in rows if now - KEEP_STALE <= row.stale_at),
        key=lambda row: (row.queue, row.host, row.pid),
    )
    return [_info(row, now) for row in shown]


def _info(row: WorkerRow, now: Number) -> WorkerInfo:
    from .records import Held, WorkerInfo  # (not for `sqlq --help`, which names KEEP_STALE)

    holds = tuple(Held(*held) for held in json.loads(row.holds))
    stale = now >= row.stale_at
    return WorkerInfo(*row[:-1], stale, holds)  # (the columns, then what they tell)
