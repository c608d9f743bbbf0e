"""What the dashboard reads, as JSON documents: the API's answers, and what the pages
show.  Each is built by sqlq.shapes, as the CLI's ``--json`` output is.

Every read goes through the backend's read-only calls (overview, browse, find, workers):
none takes the write lock or applies what fell due, so the dashboard never holds up
a worker; it shows tasks as last written (a lease that ran out is still RESERVED,
its deadline past, until the next call on its queue releases it).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from ..backend import Backend, TaskRow
from ..browse import ORDERS, Browse, Key, Order
from ..contract import MAX_BATCH, State, check_queue_name, check_task_id, check_task_name
from ..durable import _info as task_info
from ..errors import InvalidArgument
from ..registry import listed
from ..shapes import overview_json, task_json, workers_json
from .history import Sample

#: Tasks per page, unless asked otherwise (at most MAX_BATCH).
PAGE = 50


def queues_json(backend: Backend) -> dict[str, Any]:
    """Every queue with its figures (``sqlq stats --json``'s shape, as of now)."""
    now = time.time()
    found = backend.overview(with_names=False)
    return {
        "database": backend.name,
        "wal_bytes": backend.storage_facts().wal_bytes,
        "now": now,
        **overview_json(found, now),
    }


def workers_of(backend: Backend) -> dict[str, Any]:
    """The workers alive now and those gone stale lately (``sqlq workers --json``'s shape)."""
    now, rows = backend.workers()
    return workers_json(backend.name, listed(rows, now, backend.find), now)


def tasks_json(backend: Backend, where: Browse) -> dict[str, Any]:
    """A page of tasks: {"tasks": [...], "next": the ``after`` of the next page, or None}."""
    found = backend.browse(where)
    return {
        "tasks": [task_json(task_info(f.task), f.queue) for f in found],
        "next": cursor(found[-1].key) if len(found) == where.limit else None,
    }


def task_json_of(backend: Backend, queue: str, task_id: str) -> dict[str, Any] | None:
    """One task (``sqlq show --json``'s shape, with its timeline), or None."""
    task = backend.find(check_queue_name(queue), check_task_id(task_id))
    if task is None:
        return None
    return {**task_json(task_info(task), queue), "timeline": timeline(task)}


def timeline(task: TaskRow) -> list[dict[str, Any]]:
    """What the task's timestamps tell, in time order: [{"at": time, "what": ...}]."""
    changed = task.updated_at not in (task.created_at, task.finished_at)
    moments = [
        (task.created_at, "added"),
        (task.run_at, "runs (WAITING until then)"),
        (task.updated_at if changed else None, f"last change (now {task.state.value})"),
        (task.stop_requested_at, "asked to stop"),
        (task.deadline, f"lease {task.token} runs out"),
        (task.finished_at, f"finished ({task.state.value})"),
    ]
    return [{"at": at, "what": what} for at, what in sorted(m for m in moments if m[0] is not None)]


#: The charts' windows: how far back they go, in seconds.
WINDOWS = {"hour": 3600, "day": 86400}
#: Their throughput is counted per minute.
BUCKET = 60


def charts_json(backend: Backend, samples: list[Sample], queue: str, window: str) -> dict[str, Any]:
    """What the queue page's charts draw over the last ``window``: the tasks that finished
    per minute, by state ("times": each minute's start), and the oldest waiting task's
    age as sampled ("age_times", "ages": seconds, None when nothing waited)."""
    queue = check_queue_name(queue)
    if window not in WINDOWS:
        raise InvalidArgument(f"window must be one of {', '.join(WINDOWS)}, not {window!r}")
    now = time.time()
    start = int(now - WINDOWS[window]) // BUCKET * BUCKET
    times = list(range(start, int(now) + 1, BUCKET))
    finished = {state: [0] * len(times) for state in ("COMPLETED", "DEAD", "CANCELLED")}
    for at, state, count in backend.finished_per_bucket(queue, start, BUCKET):
        minute = (int(at) - start) // BUCKET
        if minute < len(times):  # (a task finished by a clock ahead of this one: not shown)
            finished[state][minute] = count
    aged = [(t, ages[queue]) for t, ages in samples if t >= start and queue in ages]
    return {
        "queue": queue,
        "window": window,
        "times": times,
        "completed": finished["COMPLETED"],
        "dead": finished["DEAD"],
        "cancelled": finished["CANCELLED"],
        "age_times": [t for t, _ in aged],
        "ages": [age for _, age in aged],
    }


#: A page cursor (``cursor``: line key, seq, row id) and a limit, in ASCII digits:
#: str.isdigit() and int() take others too (superscripts, Arabic-Indic digits), and
#: int() refuses some of those.
_CURSOR = re.compile(
    r"(-?[0-9]{1,20}(?:\.[0-9]{1,20})?(?:e[-+]?[0-9]{1,3})?)_(-?[0-9]{1,18})_([0-9]{1,18})"
)
_NUMBER = re.compile(r"[0-9]{1,18}")


def cursor(key: Key) -> str:
    """A page's key as text (the float's repr: read back exactly)."""
    line_key, seq, row_id = key
    return f"{line_key!r}_{seq}_{row_id}"


def browse_of(params: Mapping[str, str]) -> Browse:
    """The Browse a request's query parameters ask for (state, queue, name, prefix,
    order, after, limit); InvalidArgument for a value that is not one."""
    state = params.get("state") or None
    if state is not None and state not in State.__members__:
        raise InvalidArgument(f"no state {state!r} (states: {', '.join(State.__members__)})")
    order = params.get("order") or "newest"
    if order not in ORDERS:
        raise InvalidArgument(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    queue = params.get("queue") or None
    return Browse(
        queue=None if queue is None else check_queue_name(queue),
        state=None if state is None else State(state),
        name=check_task_name(params.get("name") or None),
        prefix=params.get("prefix") or None,
        order=_order(order),
        after=_key(params.get("after") or None),
        limit=_limit(params.get("limit") or None),
    )


def _order(text: str) -> Order:
    return "line" if text == "line" else "newest"


def _key(text: str | None) -> Key | None:
    if text is None:
        return None
    found = _CURSOR.fullmatch(text)
    if found is None or not math.isfinite(float(found[1])):
        raise InvalidArgument(f"not a page cursor: {text!r}")
    return float(found[1]), int(found[2]), int(found[3])


def _limit(text: str | None) -> int:
    if text is None:
        return PAGE
    if _NUMBER.fullmatch(text) is None or not 1 <= int(text) <= MAX_BATCH:
        raise InvalidArgument(f"limit must be a whole number from 1 to {MAX_BATCH}, not {text!r}")
    return int(text)


#: The fields of a JSON API action's body (see action_form).
ACTION_FIELDS = ("queue", "task_id", "name", "payload")


def action_form(body: Any) -> dict[str, str]:
    """The form of an action the JSON API is asked for: a JSON object of ``queue``,
    ``task_id`` and ``name`` (strings) and ``payload`` (any JSON value, given to the
    action as its JSON text, as the page's form gives it); InvalidArgument else."""
    if not isinstance(body, dict):
        raise InvalidArgument("an action's body must be a JSON object")
    unknown = sorted(set(body) - set(ACTION_FIELDS))
    if unknown:
        raise InvalidArgument(f"unknown fields {unknown} (fields: {', '.join(ACTION_FIELDS)})")
    form = {}
    for field in ACTION_FIELDS[:-1]:
        value = body.get(field)
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{field} must be a string, not {type(value).__name__}")
        if value is not None:
            form[field] = value
    if body.get("payload") is not None:
        form["payload"] = json.dumps(body["payload"], ensure_ascii=False)
    return form
