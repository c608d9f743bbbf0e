"""The dashboard's actions: redrive, purge the dead, cancel, pause, resume, add a task.

Each goes through the sqlq.Queue call that the CLI's command of the same name makes,
on a Queue opened for it (``migrate=False``: the dashboard never changes a schema),
and answers with an :class:`Outcome`: what it did, or why it did nothing (the
state changed underneath: a task no longer DEAD, a queue paused already ...), and
the document the command's ``--json`` prints (sqlq.shapes), which the JSON API
answers.  The pages' forms and the API's JSON bodies both come here as a ``form``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .. import payload as payloads
from ..durable import Queue
from ..errors import InvalidArgument
from ..shapes import added_json, cancelled_json, paused_json, purged_json, redriven_json

#: What the actions ask to be confirmed (they destroy or stop something).
DESTRUCTIVE = frozenset({"purge", "cancel"})


class Outcome(NamedTuple):
    """What an action did: ``done`` False when the state changed underneath (HTTP 409);
    ``document``: the CLI's ``--json`` of the same call."""

    done: bool
    message: str
    document: dict[str, Any]


#: An action: (the queue, the form, the database's name) -> its outcome.
Action = Callable[[Queue, dict[str, str], str], Outcome]


def _task_id(form: dict[str, str]) -> str:
    task_id = form.get("task_id", "")
    if not task_id:
        raise InvalidArgument("which task? (the form has no task_id)")
    return task_id


def redrive(queue: Queue, form: dict[str, str], database: str) -> Outcome:
    """One DEAD task (task_id) or all of the queue's (no task_id) back to the line; an
    empty task_id is no task's id (InvalidTaskId), not all of them."""
    task_id = form.get("task_id")
    count = queue.redrive(task_ids=None if task_id is None else [task_id])
    document = redriven_json(database, queue.queue, count, None if task_id is None else 1 - count)
    if task_id is None:
        done = f"{count} dead task(s) of queue {queue.queue!r} sent back to the line"
        return Outcome(True, done, document)
    if count:
        done = f"task {task_id!r} is AVAILABLE again, at the back of the line"
        return Outcome(True, done, document)
    why = f"task {task_id!r} {_no_longer(queue, task_id, 'DEAD')}: not redriven"
    return Outcome(False, why, document)


def purge_dead(queue: Queue, _form: dict[str, str], database: str) -> Outcome:
    count = queue.purge(states=("DEAD",))
    document = purged_json(database, queue.queue, {"DEAD": count}, groups=count.groups)
    return Outcome(True, f"{count} dead task(s) of queue {queue.queue!r} deleted", document)


def cancel(queue: Queue, form: dict[str, str], database: str) -> Outcome:
    task_id = _task_id(form)
    done = queue.cancel(task_id)
    document = cancelled_json(database, queue.queue, {task_id: done})
    if done is None:
        why = _no_longer(queue, task_id, "AVAILABLE, WAITING or RESERVED")
        return Outcome(False, f"task {task_id!r} {why}: nothing to cancel", document)
    if done == "STOPPING":
        return Outcome(True, f"task {task_id!r} runs: its worker is asked to stop it", document)
    return Outcome(True, f"task {task_id!r} is CANCELLED", document)


def pause(queue: Queue, _form: dict[str, str], database: str) -> Outcome:
    changed = queue.pause()
    document = paused_json(database, queue.queue, True, changed)
    if changed:
        done = f"queue {queue.queue!r} is paused: workers take none of its tasks"
        return Outcome(True, done, document)
    return Outcome(False, f"queue {queue.queue!r} was paused already", document)


def resume(queue: Queue, _form: dict[str, str], database: str) -> Outcome:
    changed = queue.resume()
    document = paused_json(database, queue.queue, False, changed)
    if changed:
        return Outcome(True, f"queue {queue.queue!r} runs again", document)
    return Outcome(False, f"queue {queue.queue!r} was not paused", document)


def add(queue: Queue, form: dict[str, str], database: str) -> Outcome:
    """Add a task: task_id, payload (JSON text, or empty for none), name (or empty)."""
    task_id = _task_id(form)
    text = form.get("payload", "").strip()
    payload = payloads.decode(text) if text else None  # (as `sqlq add --payload` reads it)
    added = queue.add(task_id, payload=payload, name=form.get("name") or None)
    document = added_json(database, queue.queue, False, int(added), int(not added))
    if added:
        return Outcome(True, f"task {task_id!r} added to queue {queue.queue!r}", document)
    why = f"queue {queue.queue!r} has a task {task_id!r} already: not added"
    return Outcome(False, why, document)


def _no_longer(queue: Queue, task_id: str, was: str) -> str:
    """What a task is, said when it is no longer ``was``."""
    state = queue.status(task_id)
    return "does not exist" if state is None else f"is not {was} (it is {state})"


ACTIONS: dict[str, Action] = {
    "redrive": redrive,
    "purge": purge_dead,
    "cancel": cancel,
    "pause": pause,
    "resume": resume,
    "add": add,
}
