"""The `sqlq` command (``sqlq.cli:main``; `python -m sqlq` runs the same).

Subcommands, one module per kind:

* reading.py: `stats`, `list`, `show`, `dead` (never create or migrate a file)
* schedules.py: `schedules` (reads only) and `unschedule`
* workers.py: `workers` (the worker registry; reads only)
* adding.py: `add` (creates a missing file)
* maintenance.py: `redrive`, `purge`, `migrate`
* control.py: `cancel`, `pause`, `resume`
* limits.py: `limits` (per-group limits)
* configure.py: `configure` (a queue's stored settings)
* running.py: `worker`, `demo`
* web.py: `web` (the dashboard; the `web` extra)

Exit codes: 0 success; 1 a sqlq error (sqlq.errors.SqlqError: the database
could not be read or written, is not a sqlq database, an unknown task, ...);
2 a usage error (bad arguments, a missing file, unreadable input).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Sequence

from ..errors import SqlqError
from ..version import __version__
from . import (
    adding,
    configure,
    control,
    limits,
    maintenance,
    reading,
    running,
    schedules,
    web,
    workers,
)
from .common import (
    DURATION_SYNTAX,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    UsageError,
    error,
)
from .running import DEMO_DB

__all__ = ["DEMO_DB", "EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "build_parser", "main", "subcommands"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `sqlq` command (one subparser per subcommand)."""
    parser = argparse.ArgumentParser(
        prog="sqlq",
        description=(
            "sqlq: a durable work queue with leases and retries, stored in SQLite. "
            "Each command has its own --help."
        ),
        epilog=(
            f"durations (--delay, --lease, --grace, ...): {DURATION_SYNTAX}. "
            "exit codes: 0 success, 1 a sqlq error (the database failed or refused, "
            "an unknown task, ...), 2 a usage error or a missing file"
        ),
    )
    parser.add_argument("--version", action="version", version=f"sqlq {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    adding.register_add(commands)
    running.register(commands)
    reading.register(commands)
    schedules.register(commands)
    workers.register(commands)
    maintenance.register(commands)
    control.register(commands)
    limits.register(commands)
    configure.register(commands)
    maintenance.register_migrate(commands)
    running.register_demo(commands)
    web.register(commands)
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


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; an unknown option is reported with the usage of its subcommand
    (argparse alone reports it with the top-level usage), and the closest options."""
    args, unknown = parser.parse_known_args(argv)
    if not unknown:
        return args
    sub = subcommands(parser)[args.command]
    if any(not word.startswith("-") for word in unknown):
        # A command whose positionals may be left out (`sqlq worker DB HANDLER`, or
        # `--django-settings` alone) takes them all at its first one, so one after an
        # option comes back unknown: parse the command's words again, intermixed.
        words = list(sys.argv[1:] if argv is None else argv)
        rest = words[words.index(args.command) + 1 :]
        args, unknown = sub.parse_known_intermixed_args(
            rest, argparse.Namespace(command=args.command)
        )
    if unknown:
        import difflib  # only for a mistyped option

        known = [s for action in sub._actions for s in action.option_strings]
        hints = {m for u in unknown for m in difflib.get_close_matches(u.split("=")[0], known, 1)}
        hint = f" (did you mean {', '.join(sorted(hints))}?)" if hints else ""
        sub.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    # Text that an outside edit stored as bad UTF-8 reads back with lone surrogates
    # (sqlite.driver.stored_text): print them as escapes instead of failing.
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:  # --help, --version, or a usage error
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        code: int = args.handler(args)
    except UsageError as exc:
        subcommands(parser)[args.command].print_usage(sys.stderr)
        error(args.command, str(exc))
        return exc.code
    except CliError as exc:
        error(args.command, str(exc))
        return exc.code
    except SqlqError as exc:
        error(args.command, str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        error(args.command, "interrupted")
        return 130
    except BrokenPipeError:  # e.g. `sqlq list DB | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_ERROR
    return code
