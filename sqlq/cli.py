"""The `sqlq` command: `sqlq demo` and `sqlq stats PATH`.

Exit codes: 0 success, 1 a sqlq error (sqlq.errors.SqlqError: the database
could not be read, is not a sqlq database, ...), 2 a usage error (bad
arguments, a missing file).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence

from . import __version__
from .contract import State
from .errors import SqlqError

DEMO_DB = "sqlq-demo.db"

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def _positive_int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "int"
    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 3600, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `sqlq` command (one subparser per subcommand)."""
    parser = argparse.ArgumentParser(
        prog="sqlq",
        description="sqlq: a durable work queue with leases and retries, stored in SQLite.",
    )
    parser.add_argument("--version", action="version", version=f"sqlq {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    demo = commands.add_parser(
        "demo",
        help="run worker processes on a demo queue and kill one of them mid-task",
        description=(
            "Add tasks to a queue in a new SQLite file and let worker processes take and "
            "complete them. One worker is killed with SIGKILL while it holds a task; that "
            "task's lease runs out and another worker completes it. Prints progress and a "
            "summary (tasks per state, retries, time taken)."
        ),
    )
    demo.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help=(
            f"the demo database (default: ./{DEMO_DB}). An earlier demo database at this path "
            "is deleted first; any other file there is left alone and the demo refuses to run"
        ),
    )
    demo.add_argument(
        "--tasks", metavar="N", type=_positive_int(1), default=40, help="tasks to add (default 40)"
    )
    demo.add_argument(
        "--workers",
        metavar="K",
        type=_positive_int(2),
        default=4,
        help="worker processes, at least 2 (default 4)",
    )
    demo.add_argument(
        "--lease",
        metavar="SECONDS",
        type=_seconds,
        default=2.0,
        help="lease of each reservation in seconds (default 2)",
    )
    demo.set_defaults(handler=_demo)

    stats = commands.add_parser(
        "stats",
        help="show the tasks per queue and state in a database, and the SQLite in use",
        description=(
            "Count the tasks of every queue in the database at PATH, per state. RESERVED "
            "counts leases as last written: a lease that ran out is released by the next "
            "call on its queue. The file must exist; it is not created."
        ),
    )
    stats.add_argument("path", metavar="PATH", help="the database file")
    stats.add_argument("--json", action="store_true", help="print the counts as JSON")
    stats.set_defaults(handler=_stats)
    return parser


def subcommands(
    parser: argparse.ArgumentParser | None = None,
) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``parser`` (default: the `sqlq` parser), by name."""
    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        code: int = args.handler(args)
    except SqlqError as exc:
        _error(args.command, str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _error(args.command, "interrupted")
        return 130
    return code


def _error(command: str, message: str) -> None:
    print(f"sqlq {command}: error: {message}", file=sys.stderr, flush=True)


# --- sqlq demo ----------------------------------------------------------------------


def _demo(args: argparse.Namespace) -> int:
    from . import demo  # multiprocessing and friends only when needed

    path = args.db if args.db is not None else DEMO_DB
    try:
        demo.remove_old_demo(path)
    except demo.DemoError as exc:
        _error("demo", str(exc))
        return EXIT_USAGE
    result = demo.run(path, tasks=args.tasks, workers=args.workers, lease_seconds=args.lease)
    if result.counts.get(State.COMPLETED, 0) != result.tasks:
        _error("demo", "not every task was completed")
        return EXIT_ERROR
    return EXIT_OK


# --- sqlq stats ---------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    from .sqlite import driver
    from .sqlite.backend import SqliteBackend

    path = os.path.abspath(args.path)
    if not os.path.exists(path):
        _error("stats", f"{args.path}: no such file (stats does not create databases)")
        return EXIT_USAGE
    if os.path.isdir(path):
        _error("stats", f"{args.path}: is a directory, not a database file")
        return EXIT_USAGE
    backend = SqliteBackend(path, migrate=False)  # reads only; refuses non-sqlq files
    try:
        found = backend.counts()
    finally:
        backend.close()
    queues: dict[str, dict[str, int]] = {}
    for queue in sorted(found):
        counts = {state.value: found[queue].get(state.value, 0) for state in State}
        # A state this version does not know (a newer schema) is shown, not dropped.
        counts.update({s: n for s, n in sorted(found[queue].items()) if s not in counts})
        queues[queue] = counts

    if args.json:
        document = {"database": path, "sqlite": driver.describe(), "queues": queues}
        print(json.dumps(document, indent=2))
        return EXIT_OK

    print(f"database: {path}")
    print(f"sqlite:   {driver.describe()}")
    if not queues:
        print("no tasks")
        return EXIT_OK
    columns = list(dict.fromkeys(s for counts in queues.values() for s in counts))
    header = ["queue", *columns, "total"]
    rows = [
        [name, *(str(c.get(s, 0)) for s in columns), str(sum(c.values()))]
        for name, c in queues.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        print("  ".join([first, *rest]))
    return EXIT_OK
