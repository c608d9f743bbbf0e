"""`sqlq schedules`: the periodic tasks a database knows, and when each runs next;
`sqlq unschedule`: forget one that no worker runs any more.

`schedules` reads what the database stores with each schedule (its spec, zone and
catch-up policy: see sqlq.schedule), so it needs none of the user's code; it only
reads, and never takes the write lock.
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from ..errors import InvalidConfig
from ..humanize import moment
from .common import (
    EXIT_ERROR,
    EXIT_OK,
    add_database,
    add_json,
    add_queue,
    inspected,
    open_queue,
    print_json,
    printable,
    sqlq_database,
    table,
)
from .maintenance import WRITE_NOTE
from .reading import READ_ONLY_NOTE

if TYPE_CHECKING:
    from ..records import ScheduleState


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    schedules = commands.add_parser(
        "schedules",
        help="the periodic tasks the database knows, their last tick and next run",
        description=(
            "List the schedules of periodic tasks that workers have ticked in this "
            "database (per queue): the cron expression or interval, the time zone, the "
            "catch-up policy, the last tick a task was added for, and the next tick. A "
            "next tick in the past means no worker with the schedule has run since. Only "
            "reads, and needs none of your code."
        ),
    )
    add_database(schedules, READ_ONLY_NOTE)
    add_json(schedules, "the schedules (times as Unix seconds)")
    schedules.set_defaults(handler=_schedules)

    forget = commands.add_parser(
        "unschedule",
        help="forget a schedule that no worker runs any more",
        description=(
            "Delete what the database keeps of a schedule (its last tick), so that "
            "`sqlq schedules` no longer lists it: for a schedule removed from the workers' "
            "code. The tasks its ticks added stay. A worker that still has the schedule "
            "stores it again as a new one, whose first task is for its first tick after "
            "that. Exit 1 if the queue kept no schedule of that name."
        ),
    )
    add_database(forget, WRITE_NOTE)
    forget.add_argument("name", metavar="NAME", help="the schedule's name")
    add_queue(forget)
    add_json(forget, "whether the schedule was forgotten")
    forget.set_defaults(handler=_unschedule)


def _schedules(args: argparse.Namespace) -> int:
    now = time.time()
    with inspected(args.db, allow_older=False) as (_, backend):
        found = [(state, _next_run(state)) for state in backend.schedules()]
    if args.json:
        print_json([{**state._asdict(), "next_run": run} for state, run in found])
        return EXIT_OK
    if not found:
        print("no schedules (a worker stores each schedule when it first ticks it)")
        return EXIT_OK
    rows = [
        [
            printable(state.queue),
            printable(state.name),
            "-" if state.task is None else printable(state.task),
            printable(state.spec),
            printable(state.tz),
            state.catch_up,
            moment(state.last_enqueued, now),
            "?" if run is None else moment(run, now),
        ]
        for state, run in found
    ]
    table(["queue", "schedule", "task", "spec", "zone", "catch-up", "last tick", "next run"], rows)
    return EXIT_OK


def _unschedule(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=True, creates="unschedule does not create databases")
    with open_queue(db, args.queue) as queue:
        forgotten = queue.forget_schedule(args.name)
    if args.json:
        print_json(
            {"database": db.name, "queue": args.queue, "name": args.name, "forgotten": forgotten}
        )
    elif forgotten:
        print(f"schedule {printable(args.name)!r} of queue {args.queue!r}: forgotten")
    else:
        print(f"queue {args.queue!r} keeps no schedule {printable(args.name)!r}")
    return EXIT_OK if forgotten else EXIT_ERROR


def _next_run(state: ScheduleState) -> Any:
    """The schedule's first tick after those it handled; None if there is none or
    this machine cannot read it (a zone it does not know)."""
    from ..schedule import Schedule  # cron expressions and time zones: only here

    try:
        schedule = Schedule.stored(state.name, state.spec, state.tz, state.catch_up, state.task)
    except (InvalidConfig, ValueError):
        return None
    return schedule.next_tick(state.handled_until)
