"""The JSON shapes of what sqlq reads: the CLI's ``--json`` output and the dashboard's
API (sqlq.web) are built by these functions, so that scripts, the CLI and the page
read the same documents.

* ``task_json``: a task (``sqlq show --json``; each task of ``list``/``dead --json``
  and of the dashboard's task pages).
* ``overview_json``: every queue of a database with its figures (the ``queues``,
  ``stats`` and ``names`` of ``sqlq stats --json``; the dashboard's queue page).
* ``workers_json``: the worker registry (``sqlq workers --json``; the dashboard's
  workers page).
* ``added_json``, ``redriven_json``, ``purged_json``, ``cancelled_json``,
  ``paused_json``: what ``sqlq add/redrive/purge/cancel/pause/resume --json`` print,
  and the dashboard's JSON actions answer (sqlq.web.actions).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import TYPE_CHECKING, Any

from .contract import Cancel, State
from .payload import Undecodable

if TYPE_CHECKING:
    from .records import QueueOverview, TaskInfo, WorkerInfo


def payload_json(payload: Any) -> tuple[str, Any]:
    """(payload_type, JSON value): "none", "json" (the value), "bytes" (base64 text)
    or "undecodable" (the text as stored)."""
    if payload is None:
        return "none", None
    if isinstance(payload, bytes):
        return "bytes", base64.b64encode(payload).decode("ascii")
    if isinstance(payload, Undecodable):
        return "undecodable", payload.text
    return "json", payload


def task_json(info: TaskInfo, queue: str) -> dict[str, Any]:
    """Every field of a TaskInfo as JSON, with the queue and the payload's type (and
    for a payload that cannot be decoded, why: payload_error)."""
    document: dict[str, Any] = {
        "queue": queue,
        **{f.name: getattr(info, f.name) for f in dataclasses.fields(info)},
    }
    document["payload_type"], document["payload"] = payload_json(info.payload)
    if isinstance(info.payload, Undecodable):
        document["payload_error"] = info.payload.reason
    if isinstance(info.result, Undecodable):
        document["result"], document["result_error"] = info.result.text, info.result.reason
    return document


def overview_json(found: dict[str, QueueOverview], now: float) -> dict[str, Any]:
    """The queues of Backend.overview as ``sqlq stats --json`` shows them, ages as of
    ``now``: {"queues": tasks per state (every state, and any a newer schema has),
    "stats": the other figures, "names": named tasks per name and state}."""
    queues: dict[str, dict[str, int]] = {}
    details: dict[str, dict[str, Any]] = {}
    for queue in sorted(found):
        figures = found[queue]
        counts = {state.value: figures.counts.get(state.value, 0) for state in State}
        # A state this version does not know (a newer schema) is shown, not dropped.
        counts.update({s: n for s, n in sorted(figures.counts.items()) if s not in counts})
        queues[queue] = counts
        front = figures.available_since
        details[queue] = {
            "total": sum(counts.values()),
            "oldest_available_age": None if front is None else max(0.0, now - front),
            "leases": counts[State.RESERVED.value],
            "next_deadline": figures.next_deadline,
            "next_run_at": figures.next_run_at,
            "paused": figures.paused,
        }
    names = {queue: found[queue].names for queue in sorted(found) if found[queue].names}
    return {"queues": queues, "stats": details, "names": names}


def workers_json(database: str, workers: list[WorkerInfo], now: float) -> dict[str, Any]:
    """The workers of the registry (sqlq.registry) shown at ``now``, each with every
    field of WorkerInfo (``holds``: objects of task_id, token and since)."""
    return {
        "database": database,
        "now": now,
        "workers": [
            {**dataclasses.asdict(worker), "holds": [held._asdict() for held in worker.holds]}
            for worker in workers
        ],
    }


def added_json(
    database: str, queue: str, created: bool, added: int, existed: int
) -> dict[str, Any]:
    """``created``: the database was made by this add; ``existed``: ids it had already."""
    return {
        "database": database,
        "queue": queue,
        "created": created,
        "added": added,
        "existed": existed,
    }


def redriven_json(database: str, queue: str, redriven: int, skipped: int | None) -> dict[str, Any]:
    """``skipped``: given ids that were not DEAD (None: every DEAD task was asked for)."""
    return {"database": database, "queue": queue, "redriven": redriven, "skipped": skipped}


def purged_json(
    database: str,
    queue: str,
    removed: dict[str, int],
    older_than: float = 0.0,
    vacuum: dict[str, int] | None = None,
    groups: int = 0,
) -> dict[str, Any]:
    """``removed``: tasks deleted per state, of those finished ``older_than`` seconds ago
    or longer; ``groups``: idle groups forgotten (Purged.groups); ``vacuum``: the
    file's size before and after."""
    return {
        "database": database,
        "queue": queue,
        "older_than": older_than,
        "removed": removed,
        "total": sum(removed.values()),
        "groups_forgotten": groups,
        "vacuum": vacuum,
    }


def cancelled_json(database: str, queue: str, tasks: dict[str, Cancel | None]) -> dict[str, Any]:
    """``tasks``: what happened to each id (None: neither, unknown or finished already)."""
    return {"database": database, "queue": queue, "tasks": tasks}


def paused_json(database: str, queue: str, paused: bool, changed: bool) -> dict[str, Any]:
    return {"database": database, "queue": queue, "paused": paused, "changed": changed}
