"""Control: `sqlq cancel`, `sqlq pause` and `sqlq resume` (see sqlq.contract).

Like `redrive` and `purge`, they need an existing sqlq database and migrate an
older schema, as sqlq.Queue does.
"""

from __future__ import annotations

import argparse

from ..contract import Cancel
from ..shapes import cancelled_json, paused_json
from .common import (
    EXIT_ERROR,
    EXIT_OK,
    add_database,
    add_json,
    add_queue,
    open_queue,
    print_json,
    printable,
    sqlq_database,
)
from .maintenance import WRITE_NOTE


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cancel = commands.add_parser(
        "cancel",
        help="cancel tasks: those not started at once, running ones at their next heartbeat",
        description=(
            "Cancel tasks of a queue. A task not started (AVAILABLE or WAITING) is CANCELLED "
            "at once: it never runs. A running task (RESERVED) is asked to stop: its worker "
            "learns it at its next heartbeat, and the task ends CANCELLED unless its handler "
            "completes it first. Prints what happened to each id; exit 1 if some id was "
            "neither (unknown, or finished already), after the others were cancelled."
        ),
    )
    add_database(cancel, WRITE_NOTE)
    cancel.add_argument("task_ids", metavar="TASK_ID", nargs="+", help="ids of tasks to cancel")
    add_queue(cancel)
    add_json(cancel, "what happened to each id (CANCELLED, STOPPING or null)")
    cancel.set_defaults(handler=_cancel)

    for name, pausing, summary, text in (
        (
            "pause",
            True,
            "pause a queue: no worker gets its tasks until it is resumed",
            "Pause a queue: from now on no worker (in any process) gets a lease of its "
            "tasks, until `sqlq resume`. Adding tasks still works, and the tasks running "
            "finish as usual (their leases are extended, completed, failed, or run out). "
            "`sqlq stats` shows the queue as PAUSED.",
        ),
        (
            "resume",
            False,
            "resume a paused queue",
            "Resume a paused queue (see `sqlq pause`): from now on workers get its tasks "
            "again, those added while it was paused included.",
        ),
    ):
        command = commands.add_parser(name, help=summary, description=text)
        add_database(command, WRITE_NOTE)
        add_queue(command)
        add_json(command, "whether the queue is paused now, and whether this changed it")
        command.set_defaults(handler=_pause, pausing=pausing)


def _cancel(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=True, creates="cancel does not create databases")
    ids = list(dict.fromkeys(args.task_ids))
    done: dict[str, Cancel | None] = {}
    why: dict[str, str] = {}
    with open_queue(db, args.queue) as queue:
        for task_id in ids:
            done[task_id] = queue.cancel(task_id)
            if done[task_id] is None:
                why[task_id] = queue.status(task_id) or "unknown"
    if args.json:
        print_json(cancelled_json(db.name, args.queue, done))
    else:
        for task_id, outcome in done.items():
            if outcome is Cancel.STOPPING:
                shown = "STOPPING (its worker is asked to stop at its next heartbeat)"
            else:
                shown = outcome or f"not cancelled ({why[task_id]})"
            print(f"{printable(task_id)}: {shown}")
    return EXIT_ERROR if why else EXIT_OK


def _pause(args: argparse.Namespace) -> int:
    verb = "pause" if args.pausing else "resume"
    db = sqlq_database(args.db, allow_older=True, creates=f"{verb} does not create databases")
    with open_queue(db, args.queue) as queue:
        changed = queue.pause() if args.pausing else queue.resume()
    if args.json:
        print_json(paused_json(db.name, args.queue, args.pausing, changed))
    else:
        if args.pausing:
            state = "paused" if changed else "paused already"
        else:
            state = "resumed" if changed else "not paused"
        print(f"queue {args.queue!r}: {state}")
    return EXIT_OK
