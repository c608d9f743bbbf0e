"""Maintenance: `sqlq redrive`, `sqlq purge`, `sqlq backup` and `sqlq migrate`.

`redrive` and `purge` need an existing sqlq database and migrate an older
schema, as sqlq.Queue does.  `backup` copies a database while workers use it,
without migrating it.  `migrate` creates or migrates a database explicitly,
and is the only command that turns an empty file into a sqlq database.  Files
that are not sqlq databases are refused unchanged.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..contract import State
from ..humanize import byte_size, span
from ..shapes import purged_json, redriven_json
from .common import (
    DURATION_SYNTAX,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Progress,
    UsageError,
    add_database,
    add_json,
    add_queue,
    creatable,
    database,
    duration,
    inspected,
    open_queue,
    opened,
    plural,
    print_json,
    sqlq_database,
)

if TYPE_CHECKING:
    from ..durable import Queue
    from ..records import Purged

WRITE_NOTE = "it must exist (it is not created) and be a sqlq database; an older schema is migrated"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`sqlq redrive`, `sqlq purge` and `sqlq backup` (migrate is listed apart, see
    build_parser)."""
    _register_redrive(commands)
    _register_purge(commands)
    _register_backup(commands)


# --- sqlq redrive --------------------------------------------------------------------------


def _register_redrive(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    redrive = commands.add_parser(
        "redrive",
        help="send dead tasks back to the line with their attempts reset",
        description=(
            "Send DEAD tasks of a queue (the given ids, or --all) to the back of the "
            "line with their attempts reset to 0. Given ids that are not DEAD are skipped; "
            "an id the queue does not have is an error (exit 1) and nothing is redriven. "
            "Prints how many went back. One transaction."
        ),
    )
    add_database(redrive, WRITE_NOTE)
    redrive.add_argument("task_ids", metavar="TASK_ID", nargs="*", help="ids of DEAD tasks")
    redrive.add_argument("--all", action="store_true", help="every DEAD task of the queue")
    add_queue(redrive)
    add_json(redrive, "the counts")
    redrive.set_defaults(handler=_redrive)


def _redrive(args: argparse.Namespace) -> int:
    if bool(args.task_ids) == args.all:
        raise UsageError("give the TASK_IDs to redrive, or --all (not both)")
    db = sqlq_database(args.db, allow_older=True, creates="redrive does not create databases")
    ids = None if args.all else list(dict.fromkeys(args.task_ids))
    with open_queue(db, args.queue) as queue:
        unknown = [task_id for task_id in ids or () if queue.status(task_id) is None]
        if unknown:
            raise CliError(
                f"no task {', '.join(map(repr, unknown))} in queue {args.queue!r}; "
                "nothing was redriven"
            )
        redriven = queue.redrive(task_ids=ids)
    skipped = None if ids is None else len(ids) - redriven
    if args.json:
        print_json(redriven_json(db.name, args.queue, redriven, skipped))
        return EXIT_OK
    note = f" ({plural(skipped, 'given id')} not DEAD, skipped)" if skipped else ""
    print(f"redrove {plural(redriven, 'dead task')} back to the line of queue {args.queue!r}{note}")
    return EXIT_OK


# --- sqlq purge ----------------------------------------------------------------------------


def _register_purge(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    purge = commands.add_parser(
        "purge",
        help="delete finished tasks (COMPLETED, DEAD, CANCELLED) and optionally shrink the file",
        description=(
            "Delete the finished tasks of a queue: COMPLETED ones by default, DEAD ones with "
            "--dead, CANCELLED ones with --cancelled, several with several of --completed, "
            "--dead and --cancelled. Their ids can be added again. Then forgets the "
            "queue's idle groups (no unfinished task, no start owed to a rate limit; "
            "their limits stay, see sqlq limits) and says how many. Deletes in "
            "transactions of 1000 tasks, so workers are never held up for long, and prints "
            "progress on stderr for long runs. Deleting does not shrink the file: SQLite "
            "reuses the free pages; --vacuum gives them back to the operating system."
        ),
    )
    add_database(purge, WRITE_NOTE)
    add_queue(purge)
    purge.add_argument("--completed", action="store_true", help="delete COMPLETED tasks")
    purge.add_argument("--dead", action="store_true", help="delete DEAD tasks (dead letters)")
    purge.add_argument("--cancelled", action="store_true", help="delete CANCELLED tasks")
    purge.add_argument(
        "--older-than",
        metavar="AGE",
        type=duration,
        default=0.0,
        help=(
            f"only tasks that finished at least AGE ago ({DURATION_SYNTAX}). "
            "Default 0: every finished task"
        ),
    )
    purge.add_argument(
        "--vacuum",
        action="store_true",
        help=(
            "afterwards run SQLite's VACUUM and a WAL checkpoint to shrink the file. VACUUM "
            "rewrites the whole database (it needs free disk space about the size of the "
            "file) and holds the write lock meanwhile: workers wait (up to their busy "
            "timeout) until it is done"
        ),
    )
    add_json(purge, "the counts")
    purge.set_defaults(handler=_purge)


def _purge(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=True, creates="purge does not create databases")
    chosen = (
        (State.COMPLETED, args.completed),
        (State.DEAD, args.dead),
        (State.CANCELLED, args.cancelled),
    )
    states = [state for state, wanted in chosen if wanted] or [State.COMPLETED]
    removed: dict[str, int] = {}
    forgotten = 0  # idle groups (each purge looks for them; the first finds them)
    start = time.time()  # one cutoff for every state: start - older_than
    progress = Progress("purge")
    with open_queue(db, args.queue) as queue:
        for state in states:

            def purge_state(state: State = state) -> Purged:
                return queue.purge(start, states=(state,), older_than=args.older_than)

            purged = _with_progress(purge_state, progress, queue, state, removed)
            removed[state.value] = int(purged)
            forgotten += purged.groups
    sizes = None
    if args.vacuum:
        with opened(db, migrate=False) as backend:
            sizes = backend.compact()
    if args.json:
        vacuum = None if sizes is None else {"before": sizes.before, "after": sizes.after}
        print_json(purged_json(db.name, args.queue, removed, args.older_than, vacuum, forgotten))
        return EXIT_OK
    age = f" that finished at least {span(args.older_than)} ago" if args.older_than else ""
    parts = " and ".join(f"{n} {state}" for state, n in removed.items())
    noun = "task" if sum(removed.values()) == 1 else "tasks"
    groups = f"; forgot {plural(forgotten, 'idle group')}" if forgotten else ""
    print(f"removed {parts} {noun}{age} from queue {args.queue!r}{groups}")
    if sizes is not None:
        print(f"vacuum: the file went from {byte_size(sizes.before)} to {byte_size(sizes.after)}")
    return EXIT_OK


def _with_progress(
    purge: Callable[[], Purged],
    progress: Progress,
    queue: Queue,
    state: State,
    removed: dict[str, int],
) -> Purged:
    """Run ``purge`` in a thread; meanwhile report on stderr about how far it got.

    Queue.purge reports nothing until it is done, so the progress is estimated from
    the queue's count of ``state``, read between its batches (workers finishing tasks
    meanwhile make it an underestimate).
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(("ok", purge()))
        except BaseException as exc:  # handed to the main thread
            outcome.append(("error", exc))

    def count() -> int:
        return queue.snapshot().counts[state.value]

    before = count()
    thread = threading.Thread(target=run, name="sqlq-purge", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(timeout=0.2)
        if thread.is_alive() and progress.due():
            done = sum(removed.values()) + max(0, before - count())
            progress.update(f"removed about {done} tasks so far")
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


# --- sqlq backup ---------------------------------------------------------------------------


def _register_backup(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = commands.add_parser(
        "backup",
        help="copy a database safely while workers use it",
        description=(
            "Copy the database DB to DEST as it was at one moment, while workers go on "
            "using it: SQLite's VACUUM INTO, run with sqlq's SQLite library, in one read "
            "transaction that never blocks the workers. The copy is compact and a single "
            "file (no -wal); it is written beside DEST, flushed to disk, and then renamed "
            "over DEST, so an earlier backup at DEST stays whole until the new one is. DEST "
            "gets DB's permissions. Open the copy like any queue (sqlq stats DEST). "
            "Every task of DB at that moment is in the copy, in its state then."
        ),
    )
    backup.add_argument(
        "db", metavar="DB", help="the database to copy; it must be a sqlq database (not migrated)"
    )
    backup.add_argument(
        "dest",
        metavar="DEST",
        help=(
            "where the copy goes; an existing DEST is replaced only if it is a sqlq "
            "database that is not open as a queue (no DEST-wal beside it)"
        ),
    )
    add_json(backup, "the paths and the size of the copy")
    backup.set_defaults(handler=_backup)


def _backup(args: argparse.Namespace) -> int:
    with inspected(args.db, allow_older=True, creates="backup does not create databases") as (
        db,
        backend,
    ):
        dest = _backup_target(args.dest)
        size = backend.backup(dest)
    if args.json:
        print_json({"database": db.name, "backup": dest, "bytes": size})
    else:
        print(f"backed up {db.name} to {dest} ({byte_size(size)})")
    return EXIT_OK


def _backup_target(arg: str) -> str:
    """The absolute path of the file DEST names (a path or a sqlite:/// URL, as DB);
    what the backup must not replace is the backend's to refuse."""
    target = database(arg)
    dest = target.file
    if dest is None:
        raise CliError(f"{target.name}: a backup goes to a file; give a path", EXIT_USAGE)
    if os.path.isdir(dest):
        raise CliError(f"{arg}: is a directory; give the backup's file name", EXIT_USAGE)
    if not os.path.isdir(os.path.dirname(dest)):
        raise CliError(f"{arg}: no such folder {os.path.dirname(dest)}", EXIT_USAGE)
    return dest


# --- sqlq migrate --------------------------------------------------------------------------


def register_migrate(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = commands.add_parser(
        "migrate",
        help="create a database, or migrate one to the current schema",
        description=(
            "Create the database (if the file does not exist or is empty) or migrate it to "
            "the schema of this sqlq, and print the schema version before and after (0 for "
            "a new file). A database already at the current version is left as it is. "
            "Files that are not sqlq databases, and databases of a newer sqlq, are refused "
            "unchanged. Migrating is also what opening a sqlq.Queue does; this command "
            "does it explicitly, e.g. before starting workers after an upgrade."
        ),
    )
    migrate.add_argument(
        "db", metavar="DB", help="the database file (created if missing; its folder must exist)"
    )
    migrate.add_argument(
        "--force",
        action="store_true",
        help=(
            "migrate even while the worker registry shows live workers of an older sqlq "
            "(refused otherwise: they would go on under rules they do not know); once "
            "migrated, workers of this sqlq and later stop at their next call"
        ),
    )
    add_json(migrate, "the versions")
    migrate.set_defaults(handler=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    db, created = creatable(args.db)
    options = {"force_migration": True} if args.force else {}
    with opened(db, **options) as backend:  # creates or migrates (refusing what is not sqlq's)
        versions = backend.schema_versions()
    before, after = versions.found, versions.current
    if args.json:
        print_json(
            {
                "database": db.name,
                "created": created,
                "before": before,
                "after": after,
                "latest": versions.latest,
            }
        )
        return EXIT_OK
    if created:
        what = "created the database"
    elif before == after:
        what = "already current"
    elif before == 0:
        what = f"set up the empty {'file' if db.file is not None else 'database'}"
    else:
        what = "migrated"
    print(f"schema version {before} -> {after} ({what}): {db.name}")
    return EXIT_OK
