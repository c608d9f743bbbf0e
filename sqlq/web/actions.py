"""The dashboard's actions: redrive, purge the dead, cancel, pause, resume, add a task.

Each goes through the sqlq.Queue call that the CLI's command of the same name makes,
on a Queue opened for it (``migrate=False``: the dashboard never changes a schema),
and answers with an :class:`Outcome`: what it did, or why it did nothing (the
state changed underneath: a task no longer DEAD, a queue paused already ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from .. import payload as payloads
from ..durable import Queue
from ..errors import InvalidArgument

#: What the actions ask to be confirmed (they destroy or stop something).
DESTRUCTIVE = frozenset({"purge", "cancel"})


class Outcome(NamedTuple):
    """What an action did: ``done`` False when the state changed underneath (HTTP 409)."""

    done: bool
    message: str


#: An action: (the queue, the form) -> its outcome.
Action = Callable[[Queue, dict[str, str]], Outcome]


def _task_id(form: dict[str, str]) -> str:
    task_id = form.get("task_id", "")
    if not task_id:
        raise InvalidArgument("which task? (the form has no task_id)")
    return task_id


def redrive(queue: Queue, form: dict[str, str]) -> Outcome:
    """One DEAD task (task_id) or all of the queue's (no task_id) back to the line."""
    task_id = form.get("task_id") or None
    count = queue.redrive(task_ids=None if task_id is None else [task_id])
    if task_id is None:
        return Outcome(True, f"{count} dead task(s) of queue {queue.queue!r} sent back to the line")
    if count:
        return Outcome(True, f"task {task_id!r} is AVAILABLE again, at the back of the line")
    return Outcome(False, f"task {task_id!r} {_no_longer(queue, task_id, 'DEAD')}: not redriven")


def purge_dead(queue: Queue, _form: dict[str, str]) -> Outcome:
    count = queue.purge(states=("DEAD",))
    return Outcome(True, f"{count} dead task(s) of queue {queue.queue!r} deleted")


def cancel(queue: Queue, form: dict[str, str]) -> Outcome:
    task_id = _task_id(form)
    done = queue.cancel(task_id)
    if done is None:
        why = _no_longer(queue, task_id, "AVAILABLE, WAITING or RESERVED")
        return Outcome(False, f"task {task_id!r} {why}: nothing to cancel")
    if done == "STOPPING":
        return Outcome(True, f"task {task_id!r} runs: its worker is asked to stop it")
    return Outcome(True, f"task {task_id!r} is CANCELLED")


def pause(queue: Queue, _form: dict[str, str]) -> Outcome:
    if queue.pause():
        return Outcome(True, f"queue {queue.queue!r} is paused: workers take none of its tasks")
    return Outcome(False, f"queue {queue.queue!r} was paused already")


def resume(queue: Queue, _form: dict[str, str]) -> Outcome:
    if queue.resume():
        return Outcome(True, f"queue {queue.queue!r} runs again")
    return Outcome(False, f"queue {queue.queue!r} was not paused")


def add(queue: Queue, form: dict[str, str]) -> Outcome:
    """Add a task: task_id, payload (JSON text, or empty for none), name (or empty)."""
    task_id = _task_id(form)
    text = form.get("payload", "").strip()
    payload = payloads.decode(text) if text else None  # (as `sqlq add --payload` reads it)
    if queue.add(task_id, payload=payload, name=form.get("name") or None):
        return Outcome(True, f"task {task_id!r} added to queue {queue.queue!r}")
    return Outcome(False, f"queue {queue.queue!r} has a task {task_id!r} already: not added")


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
