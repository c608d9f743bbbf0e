"""The commands that inspect a database: `sqlq stats`, `sqlq list`, `sqlq show`, `sqlq dead`.

None of them creates, migrates or changes the schema of a file.  `stats` only
reads; `list`, `show` and `dead` make the same calls as sqlq.Queue.tasks, .info
and .dead, which (like every queue call) first apply what fell due: leases that
ran out are released and WAITING tasks whose time came become AVAILABLE.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..contract import State
from ..humanize import byte_size, figure, moment, relative, span
from ..payload import Undecodable
from ..settings import DEFAULTS, QueueSettings
from ..shapes import overview_json, task_json
from .common import (
    EXIT_OK,
    CliError,
    Database,
    UsageError,
    add_database,
    add_json,
    add_limit,
    add_queue,
    current_version,
    existing,
    open_queue,
    opened,
    positive_int,
    print_json,
    printable,
    seconds,
    shorten,
    sqlq_database,
    state_name,
    table,
)
from .configure import retry_text

if TYPE_CHECKING:
    import threading

    from ..records import QueueOverview, TaskInfo

READ_ONLY_NOTE = "it must exist and be a sqlq database at the current schema; it is not created"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    stats = commands.add_parser(
        "stats",
        help="tasks per queue and state, the front of each line, leases, the SQLite in use",
        description=(
            "Show every queue in the database: its tasks per state, how long the front of "
            "its line has waited, its leases in flight, the soonest lease deadline, the "
            "soonest wake-up of a WAITING task, and PAUSED for a paused queue "
            "(`sqlq pause`). Also shows the SQLite library in use. "
            "stats only reads, in one snapshot, and never takes the write lock, so it is "
            "safe to run in a loop next to busy workers. It shows "
            "the tasks as last written: a lease that ran out is still counted as RESERVED "
            "(its deadline shown as overdue) until the next call on its queue releases it."
        ),
    )
    add_database(stats, READ_ONLY_NOTE)
    add_json(stats, "the database, its queues and their figures")
    stats.add_argument(
        "--watch",
        action="store_true",
        help=(
            "read again every --interval until Ctrl-C, a line per queue each time: the tasks "
            "per state, how fast AVAILABLE, COMPLETED and DEAD change, the age of the oldest "
            "AVAILABLE task, and while AVAILABLE goes down a progress bar and an estimate of "
            "the time left"
        ),
    )
    stats.add_argument(
        "--interval",
        metavar="DURATION",
        type=seconds(0, 86400, allow_minimum=False),
        default=None,
        help="with --watch: time between two reads (default 2s)",
    )
    stats.add_argument(
        "--count",
        metavar="N",
        type=positive_int(1),
        default=None,
        help="with --watch: stop after N reads (default: until Ctrl-C)",
    )
    stats.set_defaults(handler=_stats)

    lister = commands.add_parser(
        "list",
        help="the tasks of a queue in the order they were added",
        description=(
            "List the tasks of a queue in the order they were added, with their state, "
            "attempts and last error (shortened to one line; --json gives every field in "
            "full). Like every queue call, it first applies what fell due (leases that ran "
            "out, WAITING tasks whose time came), so it takes the write lock briefly."
        ),
    )
    add_database(lister, READ_ONLY_NOTE)
    add_queue(lister)
    lister.add_argument(
        "--state",
        type=state_name,
        metavar="STATE",
        help=f"only tasks in this state ({', '.join(s.value for s in State)})",
    )
    add_limit(lister, "tasks")
    add_json(lister, "the tasks (every field of each)")
    lister.set_defaults(handler=_list)

    show = commands.add_parser(
        "show",
        help="everything stored about one task",
        description=(
            "Show every field of one task: state, attempts, lease token and deadline, when "
            "it runs (WAITING), timestamps, the full last error and the payload "
            "(pretty-printed JSON; for a bytes payload only its size, --json gives it as "
            "base64). Exit 1 if the queue has no such task. Like every queue call, it first "
            "applies what fell due."
        ),
    )
    add_database(show, READ_ONLY_NOTE)
    show.add_argument("task_id", metavar="TASK_ID", help="the task's id")
    add_queue(show)
    add_json(show, "the task")
    show.set_defaults(handler=_show)

    dead = commands.add_parser(
        "dead",
        help="the dead letters of a queue: tasks that used all their attempts",
        description=(
            "List the DEAD tasks of a queue, the longest dead first, with their attempts, "
            "when they died and their last error. `sqlq redrive` sends them back to the "
            "line. Like every queue call, it first applies what fell due."
        ),
    )
    add_database(dead, READ_ONLY_NOTE)
    add_queue(dead)
    add_limit(dead, "dead tasks")
    add_json(dead, "the dead tasks (every field of each)")
    dead.set_defaults(handler=_dead)


# --- sqlq stats --------------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    db = existing(args.db, "stats does not create databases")
    if args.watch:
        if args.json:
            raise UsageError("--watch prints lines for people; --json goes without it")
        return _watch(db, 2.0 if args.interval is None else args.interval, args.count)
    if args.interval is not None or args.count is not None:
        raise UsageError("--interval and --count go with --watch")
    now = time.time()  # of the ages; Queue.stats takes max(this, the database clock)
    with opened(db, migrate=False) as backend:
        version = current_version(backend, db)
        found = backend.overview(with_names=True)
        wal = backend.storage_facts().wal_bytes
        software = backend.describe()
        stored = backend.settings(None)

    figures = overview_json(found, now)
    queues, details, names = figures["queues"], figures["stats"], figures["names"]
    settings = {
        name: (stored.get(name), stored.get(name, DEFAULTS)) for name in sorted({*queues, *stored})
    }
    if args.json:
        print_json(
            {
                "database": db.name,
                # as the text's label: the SQLite library's version, or the server's
                ("sqlite" if db.file is not None else "server"): software,
                "schema_version": version,
                "wal_bytes": wal,
                "now": now,
                **figures,
                "settings": {
                    name: {**use.as_json(), "stored": own is not None}
                    for name, (own, use) in settings.items()
                },
                "default_settings": DEFAULTS.as_json(),
            }
        )
        return EXIT_OK

    print(f"database: {db.name}")
    print(f"{'sqlite' if db.file is not None else 'server'}:   {software}")
    print(f"schema:   version {version}")
    if db.file is not None:  # a database on a server keeps no -wal file of its own
        shown = "unknown (cannot look at the -wal file)" if wal is None else byte_size(wal)
        print(f"wal:      {shown} (the -wal file; back within 4 MiB after checkpoints)")
    if not queues:
        print("no tasks")
        _settings_table(settings)
        return EXIT_OK
    print()
    columns = list(dict.fromkeys(s for counts in queues.values() for s in counts))
    rows = [
        [printable(name), *(str(c.get(s, 0)) for s in columns), str(details[name]["total"])]
        for name, c in queues.items()
    ]
    table(["queue", *columns, "total"], rows, right=range(1, len(columns) + 2))
    print()
    rows = []
    for name, d in details.items():
        age = d["oldest_available_age"]
        deadline = relative(d["next_deadline"], now)
        if d["next_deadline"] is not None and d["next_deadline"] <= now:
            deadline += " (overdue)"
        rows.append(
            [
                printable(name),
                "-" if age is None else span(age),
                str(d["leases"]),
                deadline,
                relative(d["next_run_at"], now),
                "PAUSED" if d["paused"] else "-",
            ]
        )
    table(["queue", "oldest available", "leases", "next deadline", "next run_at", "claims"], rows)
    if names:
        _name_counts(names, columns)
    _settings_table(settings)
    return EXIT_OK


def _settings_table(settings: dict[str, tuple[QueueSettings | None, QueueSettings]]) -> None:
    """The queues' settings: (stored or None, in use) by queue (see sqlq.settings)."""
    if not settings:
        return
    print()
    print("settings (`sqlq configure` changes them):")
    table(
        ["queue", "lease", "max attempts", "retry", "settings"],
        [
            [printable(name), span(use.lease_seconds), str(use.max_attempts),
             retry_text(use), "stored" if own is not None else "defaults"]
            for name, (own, use) in settings.items()
        ],
        indent="  ",
    )  # fmt: skip


def _name_counts(names: dict[str, dict[str, dict[str, int]]], columns: list[str]) -> None:
    """The table of named tasks per queue, name and state."""
    print()
    rows = [
        [
            printable(queue),
            printable(name),
            *(str(c.get(s, 0)) for s in columns),
            str(sum(c.values())),
        ]
        for queue, by_name in names.items()
        for name, c in by_name.items()
    ]
    table(["queue", "name", *columns, "total"], rows, right=range(2, len(columns) + 3))


# --- sqlq list / show / dead ---------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=False, creates="list does not create databases")
    with open_queue(db, args.queue) as queue:
        tasks = queue.tasks(state=args.state, limit=args.limit)
    if args.json:
        print_json(
            {
                "database": db.name,
                "queue": args.queue,
                "state": args.state,
                "limit": args.limit,
                "tasks": [task_json(t, args.queue) for t in tasks],
            }
        )
        return EXIT_OK
    which = f" in state {args.state}" if args.state else ""
    if not tasks:
        print(f"no tasks{which} in queue {args.queue!r}")
        return EXIT_OK
    grouped = any(t.group is not None for t in tasks)  # a column only where it says something
    prioritised = any(t.priority for t in tasks)  # the column only where priorities are used
    rows = [
        [
            printable(t.task_id),
            _name(t),
            *([shorten(t.group, 20)] if grouped else []),
            t.state,
            *([str(t.priority)] if prioritised else []),
            f"{t.attempts}/{t.max_attempts}",
            shorten(_reported(t), 30),
            shorten(t.last_error),
        ]
        for t in tasks
    ]
    header = ["task_id", "name", *(["group"] if grouped else []), "state"]
    priority = ["priority"] if prioritised else []
    table([*header, *priority, "attempts", "progress", "last_error"], rows)
    if len(tasks) == args.limit:
        print(f"(the first {args.limit} tasks{which}; --limit N shows more)")
    return EXIT_OK


def _show(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=False, creates="show does not create databases")
    with open_queue(db, args.queue) as queue:
        info = queue.info(args.task_id)
    if info is None:
        raise CliError(f"no task {args.task_id!r} in queue {args.queue!r}")
    if args.json:
        print_json({"database": db.name, **task_json(info, args.queue)})
        return EXIT_OK
    for name, value in _fields(info, args.queue, time.time()):
        lines = value.splitlines() or [""]
        print(f"{name + ':':<{SHOW_LABELS - 1}} {lines[0]}")
        for line in lines[1:]:
            print(" " * SHOW_LABELS + line)
    return EXIT_OK


#: The width of the labels of `sqlq show` and the space after them (one longer label,
#: "stop_requested_at:", takes just more room).
SHOW_LABELS = 14


def _fields(info: TaskInfo, queue: str, now: float) -> list[tuple[str, str]]:
    return [
        ("task_id", printable(info.task_id)),
        ("queue", printable(queue)),
        ("name", _name(info)),
        ("group", "-" if info.group is None else printable(info.group)),
        ("key", "-" if info.key is None else printable(info.key)),
        ("state", info.state),
        ("priority", str(info.priority)),
        ("attempts", str(info.attempts)),
        ("max_attempts", str(info.max_attempts)),
        ("token", "-" if info.token is None else str(info.token)),
        ("deadline", moment(info.deadline, now)),
        ("run_at", moment(info.run_at, now)),
        ("created_at", moment(info.created_at, now)),
        ("updated_at", moment(info.updated_at, now)),
        ("finished_at", moment(info.finished_at, now)),
        ("stop_requested_at", moment(info.stop_requested_at, now)),
        ("last_error", "-" if info.last_error is None else _lines(info.last_error)),
        ("progress", "-" if info.progress is None else figure(info.progress)),
        ("progress_message", _lines(info.progress_message or "-")),
        ("payload", _stored(info.payload)),
        ("result", _stored(info.result)),
    ]


def _stored(value: Any) -> str:
    """A payload or result as ``show`` prints it."""
    if value is None:
        return "none"
    if isinstance(value, bytes):
        return f"{len(value)} bytes of binary data (--json shows them as base64)"
    if isinstance(value, Undecodable):
        return f"cannot be decoded ({value.reason}); as stored:\n{value.text}"
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if not text.isascii() and not _encodable(text):  # lone surrogates (outside edits)
        text = json.dumps(value, indent=2)
    return text


def _reported(info: TaskInfo) -> str | None:
    """The task's latest progress report as one line, or None if there is none."""
    parts = [] if info.progress is None else [figure(info.progress)]
    if info.progress_message:
        parts.append(printable(info.progress_message))
    return " ".join(parts) or None


def _lines(text: str) -> str:
    """A text of many lines (a traceback) with each line printable."""
    return "\n".join(map(printable, text.splitlines()))


def _name(info: TaskInfo) -> str:
    return "-" if info.name is None else printable(info.name)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _dead(args: argparse.Namespace) -> int:
    db = sqlq_database(args.db, allow_older=False, creates="dead does not create databases")
    with open_queue(db, args.queue) as queue:
        tasks = queue.dead(limit=args.limit)
    if args.json:
        print_json(
            {
                "database": db.name,
                "queue": args.queue,
                "limit": args.limit,
                "tasks": [task_json(t, args.queue) for t in tasks],
            }
        )
        return EXIT_OK
    if not tasks:
        print(f"no dead tasks in queue {args.queue!r}")
        return EXIT_OK
    now = time.time()
    rows = [
        [
            printable(t.task_id),
            _name(t),
            f"{t.attempts}/{t.max_attempts}",
            relative(t.finished_at, now),
            shorten(t.last_error),
        ]
        for t in tasks
    ]
    table(["task_id", "name", "attempts", "died", "last_error"], rows)
    if len(tasks) == args.limit:
        print(f"(the first {args.limit} dead tasks; --limit N shows more)")
    return EXIT_OK


# --- sqlq stats --watch ----------------------------------------------------------------------

#: States whose rate of change --watch shows.
WATCH_RATES = (State.AVAILABLE.value, State.COMPLETED.value, State.DEAD.value)
#: Width of the progress bar, in characters.
BAR_WIDTH = 20


@dataclass
class _Drain:
    """How far a queue's AVAILABLE count has come down from its highest."""

    peak: int
    since: float  # when the peak was read


def _watch(db: Database, interval: float, count: int | None) -> int:
    """Read the figures every ``interval`` seconds and print a line per queue, until
    Ctrl-C or ``count`` reads.  Clears the screen first on a terminal.  A file
    replaced meanwhile (a restore) is read anew, and said; while the path names
    no file, that is said instead.

    Ctrl-C (SIGINT) ends the watch between reads: it sets a flag, so that no
    KeyboardInterrupt lands inside a read, where it could leave the queue's lock
    taken and the closing of the database waiting for it for good."""
    import signal
    import threading

    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # (no signals there)
        return _watch_until(db, interval, count, stopped)
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stopped.set())
    try:
        return _watch_until(db, interval, count, stopped)
    finally:
        signal.signal(signal.SIGINT, previous)


def _watch_until(db: Database, interval: float, count: int | None, stopped: threading.Event) -> int:
    clear = sys.stdout.isatty()
    before: tuple[float, dict[str, dict[str, int]]] | None = None
    drains: dict[str, _Drain] = {}
    reads = 0

    def show(now: float, lines: list[str]) -> bool:
        nonlocal reads
        reads += 1
        if clear:
            print("\x1b[H\x1b[2J", end="")
        stamp = datetime.fromtimestamp(now, UTC).strftime("%H:%M:%S")
        for line in lines:
            print(f"[{stamp}] {line}", flush=True)
        stopped.wait(max(0.0, now + interval - time.time()))
        return stopped.is_set() or (count is not None and reads >= count)

    watched = None  # the file read last
    while True:
        identity = _identity(db.file)
        if identity is None:
            if show(time.time(), [f"{db.name}: no such file (waiting for it)"]):
                return EXIT_OK
            continue
        if watched is not None and identity != watched:
            print(f"{db.name} was replaced: reading the new file", flush=True)
            before, drains = None, {}  # another file: its own rates and progress
        watched = identity
        with opened(db, migrate=False) as backend:
            current_version(backend, db)
            while _identity(db.file) == identity:
                now = time.time()
                found = backend.overview(with_names=False)
                lines = [
                    _watch_line(queue, found[queue], now, before, drains) for queue in sorted(found)
                ]
                before = (now, {queue: found[queue].counts for queue in found})
                if show(now, lines or ["no tasks"]):
                    return EXIT_OK


def _identity(file: str | None) -> tuple[int, ...] | None:
    """Which file ``file`` names now (device, inode), or None if none; always () for
    a database on a server (``file`` None), which no file can replace."""
    if file is None:
        return ()
    try:
        st = os.stat(file)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def _watch_line(
    queue: str,
    figures: QueueOverview,
    now: float,
    before: tuple[float, dict[str, dict[str, int]]] | None,
    drains: dict[str, _Drain],
) -> str:
    counts, front = figures.counts, figures.available_since
    parts = []
    for state in [s.value for s in State] + sorted(set(counts) - {s.value for s in State}):
        part = f"{state} {counts.get(state, 0)}"
        if before is not None and state in WATCH_RATES and now > before[0]:
            earlier = before[1].get(queue, {}).get(state, 0)
            part += f" ({(counts.get(state, 0) - earlier) / (now - before[0]):+.1f}/s)"
        parts.append(part)
    age = "-" if front is None else span(max(0.0, now - front))
    paused = " (PAUSED)" if figures.paused else ""
    line = f"{printable(queue)}{paused}: {', '.join(parts)}; oldest available {age}"
    available = counts.get(State.AVAILABLE.value, 0)
    drain = drains.get(queue)
    if drain is None or available >= drain.peak:
        drains[queue] = _Drain(available, now)
        return line
    return f"{line}; {_progress(drain, available, now)}"


def _progress(drain: _Drain, available: int, now: float) -> str:
    """A bar of how much of the highest AVAILABLE count is gone, and at the pace
    since then, the time left."""
    done = drain.peak - available
    filled = round(BAR_WIDTH * done / drain.peak)
    bar = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {100 * done // drain.peak}%"
    if not available:
        return f"{bar} drained"
    return f"{bar} ETA {span(available * (now - drain.since) / done)}"
