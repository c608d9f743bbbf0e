"""`sqlq workers`: the workers alive now (the worker registry, sqlq.registry): their
host and pid, queue, since when they run, their last heartbeat, and the tasks each
holds.  Reads only, and never takes the write lock."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..humanize import relative
from ..registry import KEEP_STALE, STALE_BEATS, held_text, listed
from .common import (
    EXIT_OK,
    add_database,
    add_json,
    inspected,
    print_json,
    printable,
    table,
)
from .reading import READ_ONLY_NOTE

if TYPE_CHECKING:
    from ..records import WorkerInfo


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    workers = commands.add_parser(
        "workers",
        help="the workers alive now: what each holds, since when, its last heartbeat",
        description=(
            "List the worker processes of every queue of the database, as they last wrote "
            "themselves in (when they start, then once per heartbeat): host, pid, queue, "
            "concurrency, since when they run, their last heartbeat, and the tasks each "
            f"holds with since when. A worker that missed {STALE_BEATS} heartbeats is "
            "marked stale (killed, its machine lost, or stuck), and each task it held "
            "says what is true of it now (still its lease, its lease ran out, or the "
            "task's state and holder now); it is listed for "
            f"{KEEP_STALE / 3600:g} hour more, then no longer. Only reads."
        ),
    )
    add_database(workers, READ_ONLY_NOTE)
    add_json(workers, "the workers (times as Unix seconds)")
    workers.set_defaults(handler=_workers)


def _workers(args: argparse.Namespace) -> int:
    with inspected(args.db, allow_older=False) as (db, backend):
        now, registry = backend.workers()
        found = listed(registry, now, backend.find)
    if args.json:
        from ..shapes import workers_json

        print_json(workers_json(db.name, found, now))
        return EXIT_OK
    if not found:
        print("no workers (each writes itself in when it starts)")
        return EXIT_OK
    rows = [
        [
            printable(w.queue),
            printable(w.host),
            str(w.pid),
            f"{len(w.holds)}/{w.concurrency}",
            relative(w.started_at, now),
            relative(w.beat_at, now) + (" STALE" if w.stale else ""),
            _holds(w, now),
        ]
        for w in found
    ]
    table(["queue", "host", "pid", "slots", "started", "heartbeat", "holds"], rows, right=(2, 3))
    return EXIT_OK


def _holds(worker: WorkerInfo, now: float) -> str:
    """The tasks a worker holds: 'id (token 7, 12s)', ...; '-' for none.  A stale
    worker's say what is true of them now: 'id (token 7, 12s: now COMPLETED)'."""
    return (
        ", ".join(
            f"{printable(h.task_id)} (token {h.token}, {relative(h.since, now)}"
            f"{': ' + held_text(h) if h.now is not None else ''})"
            for h in worker.holds
        )
        or "-"
    )
