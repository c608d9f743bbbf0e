"""`sqlq configure`: a queue's stored settings (lease length, attempts, retry policy;
see sqlq.settings), shown, or changed for every process that opens the queue without
them (`sqlq worker` without --lease, `sqlq add` without --max-attempts/--retry, a
sqlq.Queue opened without them).

Like `sqlq add`, it creates a missing database file and migrates an older schema.
"""

from __future__ import annotations

import argparse

from ..humanize import span
from ..settings import DEFAULTS, QueueSettings
from .common import (
    DURATION_SYNTAX,
    EXIT_OK,
    RETRY_SYNTAX,
    add_json,
    add_lease_option,
    add_max_attempts_option,
    add_queue,
    add_retry_option,
    creatable,
    open_queue,
    print_json,
)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    configure = commands.add_parser(
        "configure",
        help="show or change a queue's stored settings (lease, attempts, retry policy)",
        description=(
            "A queue's settings are stored with it: every process that opens the queue "
            "without giving them (sqlq worker without --lease, sqlq add without "
            "--max-attempts or --retry, a sqlq.Queue opened without them) uses them; one "
            "given applies to that process alone. Without options, shows them; with "
            "options, stores those given and keeps the others. Processes that have the "
            "queue open keep the settings they read until they open it again; tasks "
            "already added keep their attempts and retry policy."
        ),
    )
    configure.add_argument(
        "db",
        metavar="DB",
        help=("the database file or URL; a missing file is created, an older schema migrated"),
    )
    add_queue(configure)
    add_lease_option(configure, f"length of each lease a worker takes ({DURATION_SYNTAX})")
    add_max_attempts_option(configure, "attempts each task added gets before it is DEAD")
    add_retry_option(configure, f"how long a failed attempt waits before the next: {RETRY_SYNTAX}")
    add_json(configure, "the settings")
    configure.set_defaults(handler=_configure)


def _configure(args: argparse.Namespace) -> int:
    db, _ = creatable(args.db)
    changes = {"lease_seconds": args.lease, "max_attempts": args.max_attempts,
               "retry": args.retry}  # fmt: skip
    with open_queue(db, args.queue) as queue:
        if any(value is not None for value in changes.values()):
            queue.configure(**changes)
        found = queue.settings()
    stored = found is not None
    settings = DEFAULTS if found is None else found
    if args.json:
        print_json({"database": db.name, "queue": args.queue, "stored": stored,
                    **settings.as_json()})  # fmt: skip
        return EXIT_OK
    print(f"queue {args.queue!r}{'' if stored else ' (sqlq defaults: none stored)'}:")
    for line in describe(settings):
        print(f"  {line}")
    return EXIT_OK


def describe(settings: QueueSettings) -> list[str]:
    """The settings for people, a line each."""
    return [
        f"lease:        {span(settings.lease_seconds)}",
        f"max attempts: {settings.max_attempts}",
        f"retry:        {retry_text(settings)}",
    ]


def retry_text(settings: QueueSettings) -> str:
    """The retry policy as RETRY_SYNTAX writes it."""
    retry = settings.retry
    if retry.kind == "immediate":
        return "immediate"
    if retry.kind == "fixed":
        return f"fixed:{retry.base:g}s"
    jitter = "" if retry.kind == "exponential_jitter" else ":no-jitter"
    return f"exponential:{retry.base:g}s:{retry.cap:g}s{jitter}"
