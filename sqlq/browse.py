"""Browsing a database's tasks across its queues, for the dashboard (sqlq.web).

``Backend.browse`` reads a page of tasks that match a :class:`Browse`, read only,
in one snapshot and without the write lock, as last written (nothing due is
applied: a lease that ran out still shows as RESERVED).  Pages are keyset pages:
a page starts after the last task of the one before (``Browse.after``), so that
a page deep in a queue of millions of tasks costs what the first one costs; there
is no OFFSET.

Rows are read by column name (``task_row``), so that columns added to the tasks
table by later schema versions do not disturb the reading of the others; a page
that shows no payload asks for none (``Browse.payloads``), since they may be large.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from .contract import State
from .retry import stored_policy
from .rows import TaskRow

#: How a page is ordered: the newest task first (the order they were added, read
#: backwards), or by position in the line, the front first: the order claims take,
#: (line_key, seq), which priorities set (see sqlq.rules.line_key).
Order = Literal["newest", "line"]
ORDERS: tuple[Order, ...] = ("newest", "line")

#: Where a page starts: (line_key, seq, row id) of the last task of the page before
#: (the newest first: the row id alone counts).
Key = tuple[float, int, int]

#: A keyset past every row (SQLite and PostgreSQL integers are at most 2**63 - 1).
_END = 2**63 - 1


@dataclass(frozen=True)
class Browse:
    """Which tasks to read: each filter given narrows them (None: any)."""

    queue: str | None = None
    state: State | None = None
    name: str | None = None
    #: Only tasks whose id starts with this.
    prefix: str | None = None
    order: Order = "newest"
    after: Key | None = None
    limit: int = 50
    #: Read each task's payload and result (False: None, for a page that shows neither).
    payloads: bool = True

    def params(self) -> dict[str, Any]:
        """The parameters of the backends' browse statements."""
        start = (-math.inf, -1, -1) if self.order == "line" else (math.inf, _END, _END)
        line_key, seq, row_id = self.after or start
        return {
            "queue": self.queue,
            "state": None if self.state is None else self.state.value,
            "name": self.name,
            "prefix": self.prefix,
            "line_key": line_key,
            "seq": seq,
            "id": row_id,
            "limit": self.limit,
            "payloads": self.payloads,
        }


class Found(NamedTuple):
    """A task that browse found, its queue, and its place in the line (the key of a
    page that starts after it)."""

    queue: str
    task: TaskRow
    line_key: float

    @property
    def key(self) -> Key:
        return self.line_key, self.task.seq, self.task.row_id


def task_row(
    columns: Sequence[str], row: Sequence[Any], text: Callable[[Any], Any] = lambda t: t
) -> Found:
    """A row of the tasks table (a browse statement's), read by column name.  ``text``
    reads back stored task ids and errors (PostgreSQL stores some escaped); a
    ``payload_bytes`` column, where there is one, holds a bytes payload."""
    c = dict(zip(columns, row, strict=True))
    payload = c["payload"] if c.get("payload_bytes") is None else c["payload_bytes"]
    error = c["last_error"]
    return Found(
        c["queue"],
        TaskRow(
            row_id=c["id"],
            task_id=text(c["task_id"]),
            state=State(c["state"]),
            attempts=c["attempts"],
            max_attempts=c["max_attempts"],
            token=c["lease_id"],
            seq=c["seq"],
            retry=stored_policy(c["retry_kind"], c["retry_base"], c["retry_cap"]),
            deadline=c["deadline"],
            run_at=c["run_at"],
            payload=payload,
            last_error=None if error is None else text(error),
            created_at=c["created_at"],
            updated_at=c["updated_at"],
            finished_at=c["finished_at"],
            name=c["name"],
            stop_requested_at=c["stop_requested_at"],
            result=c["result"],
            progress=c["progress"],
            progress_message=c["progress_message"],
            dedupe_key=c["dedupe_key"],
            priority=c["priority"],
            group=c["group_key"],
        ),
        c["line_key"],
    )
