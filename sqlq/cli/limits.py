"""`sqlq limits`: the per-key limits of a queue (see sqlq.Queue.set_limit), shown, set
or removed, and the groups with unfinished tasks (their leases now).

Like `cancel` and `pause`, it needs an existing sqlq database and migrates an older
schema, as sqlq.Queue does.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..contract import MAX_LIMIT, Limit
from ..humanize import span
from .common import (
    EXIT_OK,
    UsageError,
    add_database,
    add_json,
    add_queue,
    named,
    open_queue,
    positive_int,
    print_json,
    printable,
    seconds,
    sqlq_database,
    table,
)
from .maintenance import WRITE_NOTE

#: How the table calls the queue's default (limits of groups without their own).
DEFAULT = "(default)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    limits = commands.add_parser(
        "limits",
        help="show or set a queue's per-group limits (leases at once, starts per period)",
        description=(
            "Per-key limits: tasks added with a group (`sqlq add --group`) obey its limits "
            "in every process: at most --concurrency leases of the group at once, and at "
            "most --rate starts per --per seconds (spaced per/rate apart). Without GROUP "
            "or --default, shows the limits set and the groups with unfinished tasks. "
            "With GROUP (or --default: every group without limits of its own) and "
            "--concurrency/--rate/--per/--unlimited, replaces that group's limits; with "
            "--remove, forgets them."
        ),
    )
    add_database(limits, WRITE_NOTE)
    limits.add_argument(
        "group", metavar="GROUP", nargs="?", type=named("group"), help="the group to set"
    )
    add_queue(limits)
    limits.add_argument(
        "--default",
        action="store_true",
        help="set the queue's default: the limits of groups without limits of their own",
    )
    limits.add_argument(
        "--concurrency",
        metavar="N",
        type=positive_int(1, MAX_LIMIT),
        help="at most N leases of the group at once",
    )
    limits.add_argument(
        "--rate",
        metavar="N",
        type=positive_int(1, MAX_LIMIT),
        help="at most N starts (claims) per --per",
    )
    limits.add_argument(
        "--per",
        metavar="DURATION",
        type=seconds(0, allow_minimum=False),
        help="the period of --rate (a duration: 1, 30s, 1m; default 1 second)",
    )
    limits.add_argument(
        "--unlimited",
        action="store_true",
        help="limits of its own that limit nothing (overriding the default)",
    )
    limits.add_argument("--remove", action="store_true", help="forget the group's limits")
    add_json(limits, "the limits and the groups in use")
    limits.set_defaults(handler=_limits)


def _limits(args: argparse.Namespace) -> int:
    setting = args.concurrency is not None or args.rate is not None or args.per is not None
    changes = setting + args.unlimited + args.remove
    if changes > 1:
        raise UsageError("give limits (--concurrency/--rate/--per), --unlimited or --remove")
    if args.default and args.group is not None:
        raise UsageError("give GROUP or --default, not both")
    target = args.group is not None or args.default
    if changes and not target:
        raise UsageError("give the GROUP to change (or --default)")
    if target and not changes:
        raise UsageError("give --concurrency/--rate/--per, --unlimited or --remove")
    db = sqlq_database(args.db, allow_older=True, creates="limits does not create databases")
    removed = None
    with open_queue(db, args.queue) as queue:
        if args.remove:
            removed = queue.remove_limit(args.group)
        elif changes:
            queue.set_limit(args.group, concurrency=args.concurrency, rate=args.rate, per=args.per)
        limits, groups = queue.limits(), queue.groups()
    if args.json:
        document: dict[str, Any] = {
            "database": db.name,
            "queue": args.queue,
            "limits": [{"group": g, **limit._asdict()} for g, limit in limits.items()],
            "groups": [{"group": g, **use._asdict()} for g, use in groups.items()],
        }
        if removed is not None:
            document["removed"] = removed
        print_json(document)
        return EXIT_OK
    if removed is False:
        print(f"{args.group or DEFAULT}: no limits were set")
    _show(args.queue, limits, groups)
    return EXIT_OK


def _show(queue: str, limits: dict[str | None, Limit], groups: dict[str, Any]) -> None:
    names = [*limits, *(g for g in groups if g not in limits)]
    if not names:
        print(f"no limits and no groups in queue {queue!r}")
        return
    rows = []
    for name in names:
        limit = limits.get(name)
        use = groups.get(name) if name is not None else None
        rows.append(
            [
                DEFAULT if name is None else printable(name),
                "(default)" if limit is None else _concurrency(limit),
                "(default)" if limit is None else _rate(limit),
                "-" if use is None else str(use.running),
                "-" if use is None else str(use.unfinished),
            ]
        )
    print(f"queue {queue!r}:")
    table(["group", "concurrency", "rate", "running", "unfinished"], rows, right=(3, 4))


def _concurrency(limit: Limit) -> str:
    return "-" if limit.concurrency is None else str(limit.concurrency)


def _rate(limit: Limit) -> str:
    if limit.rate is None or limit.per is None:
        return "-"
    return f"{limit.rate} per {span(limit.per)}"
