"""What the subcommands share: argument types, database checks, output helpers."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from ..contract import (
    DEFAULT_AGING,
    MAX_ATTEMPTS,
    MAX_BATCH,
    MAX_LEASE_SECONDS,
    MAX_TIME,
    State,
    check_name,
    check_queue_name,
)
from ..errors import InvalidArgument, InvalidConfig, SchemaError
from ..retry import Retry

if TYPE_CHECKING:  # SQLAlchemy and the backends load when a command opens a database
    from ..backend import Backend
    from ..durable import Queue

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

#: Seconds between two progress lines on stderr (tests set it to 0).
PROGRESS_SECONDS = 1.0


class CliError(Exception):
    """A failure the command reports as ``sqlq <command>: error: <message>``."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.code = code


class UsageError(CliError):
    """Arguments that argparse cannot check alone; reported with the command's usage (exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_USAGE)


# --- argument types -------------------------------------------------------------------


def _typed(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    parse.__name__ = name  # argparse names the type in "invalid <name> value" messages
    return parse


def positive_int(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, got {value}")
        return value

    return _typed("int", parse)


def named(what: str) -> Callable[[str], str]:
    """The parser of an argument naming a task's name or a group (as check_name takes it)."""

    def parse(text: str) -> str:
        try:
            return check_name(text, what, InvalidArgument)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return _typed(what, parse)


_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|[wdhms])", re.I)
#: How a duration may be written, for help texts and error messages.
DURATION_SYNTAX = "seconds, or a number with a unit: 250ms, 10s, 1.5m, 2h, 1d, 1w, 1h30m"


def _duration_value(text: str) -> float:
    """Seconds as a number (``90``, ``1.5``) or with units (``7d``, ``1.5m``, ``1h30m``)."""
    spec = text.strip()
    try:
        return float(spec)
    except ValueError:
        parts = _PART.findall(spec)
        if not parts or _PART.sub("", spec).strip():
            raise argparse.ArgumentTypeError(
                f"not a duration: {text!r} (write {DURATION_SYNTAX})"
            ) from None
        return sum(float(n) * _UNITS[unit.lower()] for n, unit in parts)


def seconds(
    minimum: float = 0.0, maximum: float = MAX_LEASE_SECONDS, *, allow_minimum: bool = True
) -> Callable[[str], float]:
    """A duration (see _duration_value) in [minimum, maximum] (or (minimum, maximum]):
    the one parser of every option that takes seconds."""

    def parse(text: str) -> float:
        value = _duration_value(text)
        low_ok = value >= minimum if allow_minimum else value > minimum
        if not (math.isfinite(value) and low_ok and value <= maximum):
            low = "at least" if allow_minimum else "more than"
            raise argparse.ArgumentTypeError(
                f"must be {low} {minimum:g} and at most {maximum:g} seconds, got {text!r} "
                f"({DURATION_SYNTAX})"
            )
        return value

    return _typed("duration", parse)


#: Any duration from 0 to MAX_LEASE_SECONDS.
duration = seconds()


RETRY_SYNTAX = "immediate, fixed:DELAY, exponential:BASE:CAP or exponential:BASE:CAP:no-jitter"


def retry_policy(text: str) -> Retry:
    """A retry policy as the command line writes it (RETRY_SYNTAX; delays are durations):
    ``immediate``, ``fixed:30s``, ``exponential:1s:5m`` (full jitter), ``...:no-jitter``."""
    kind, *args = text.strip().split(":")
    try:
        if kind == "immediate" and not args:
            return Retry.immediate()
        if kind == "fixed" and len(args) == 1:
            return Retry.fixed(_duration_value(args[0]))
        if kind == "exponential" and len(args) in (2, 3) and args[2:] in ([], ["no-jitter"]):
            base, cap = (_duration_value(a) for a in args[:2])
            return Retry.exponential(base, cap, jitter=len(args) == 2)
    except InvalidConfig as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    raise argparse.ArgumentTypeError(f"not a retry policy: {text!r} (write {RETRY_SYNTAX})")


retry_policy.__name__ = "retry policy"


# --- a queue's stored settings as options (sqlq add, configure, worker) ---------------------
# Each setting's option, with its type and range, is declared here once; each command says
# in its own help what the option does there.  Not given: None (the queue's stored setting).


def add_lease_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--lease DURATION``: more than 0, at most MAX_LEASE_SECONDS."""
    parser.add_argument(
        "--lease",
        metavar="DURATION",
        type=seconds(0, MAX_LEASE_SECONDS, allow_minimum=False),
        default=None,
        help=help,
    )


def add_max_attempts_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--max-attempts N``: 1 to MAX_ATTEMPTS."""
    parser.add_argument(
        "--max-attempts", metavar="N", type=positive_int(1, MAX_ATTEMPTS), default=None, help=help
    )


def add_retry_option(parser: argparse.ArgumentParser, help: str) -> None:
    """``--retry POLICY``, written as RETRY_SYNTAX says."""
    parser.add_argument("--retry", metavar="POLICY", type=retry_policy, default=None, help=help)


def unix_time(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a Unix time in seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= MAX_TIME):
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_TIME}, got {text}")
    return value


unix_time.__name__ = "Unix time"


def queue_name(text: str) -> str:
    try:
        return check_queue_name(text)
    except InvalidConfig as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


queue_name.__name__ = "queue name"


def state_name(text: str) -> str:
    try:
        return State(text.upper()).value
    except ValueError:
        names = ", ".join(s.value for s in State)
        raise argparse.ArgumentTypeError(f"not a state: {text!r} (one of {names})") from None


state_name.__name__ = "state"


def add_database(parser: argparse.ArgumentParser, note: str) -> None:
    parser.add_argument("db", metavar="DB", help=f"the database file; {note}")


def add_queue(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--queue",
        metavar="NAME",
        type=queue_name,
        default="default",
        help="the queue inside the file (default: %(default)s)",
    )


def add_json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json", action="store_true", help=f"print {what} as one JSON document on stdout"
    )


def add_limit(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--limit",
        metavar="N",
        type=positive_int(1, MAX_BATCH),
        default=100,
        help=f"show at most N {what} (1 to {MAX_BATCH}; default %(default)s)",
    )


# --- the database -------------------------------------------------------------------------

MIGRATE_HINT = "run `sqlq migrate {path}` to migrate it"


class Database(NamedTuple):
    """A DB argument as the commands use it."""

    #: What to open: a file's real path, or the URL of a database on a server.
    target: str
    #: What output calls it: the file's path, or the URL without its password (nor a
    #: ``password`` query parameter).
    name: str
    #: The file it names, or None for a database on a server.
    file: str | None


@contextmanager
def _usage_error_if_refused() -> Iterator[None]:
    """InvalidConfig from naming or opening a database: the DB argument names none
    that sqlq can open (a CliError, exit 2)."""
    try:
        yield
    except InvalidConfig as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def database(arg: str) -> Database:
    """The database a DB argument names: a path or a URL, whatever sqlq.Queue takes
    (the registry, sqlq.backends, tells which name a file)."""
    from ..backends import database_file

    with _usage_error_if_refused():
        file = database_file(arg)
    if file is not None:
        return Database(file, file, file)
    import sqlalchemy as sa  # a URL (a file path needs no SQLAlchemy)

    url = sa.engine.make_url(arg)
    if "password" in url.query:  # libpq takes the password as a query parameter too
        url = url.update_query_dict({"password": "***"})
    return Database(arg, url.render_as_string(hide_password=True), None)


def existing(arg: str, creates: str = "") -> Database:
    """The database of a command that does not create one: a file must exist and be a
    regular file, else a CliError with exit 2."""
    db = database(arg)
    if db.file is not None and not os.path.exists(db.file):
        hint = f" ({creates})" if creates else ""
        raise CliError(f"{arg}: no such file{hint}", EXIT_USAGE)
    if db.file is not None and os.path.isdir(db.file):
        raise CliError(f"{arg}: is a directory, not a database file", EXIT_USAGE)
    return db


def creatable(arg: str) -> tuple[Database, bool]:
    """The database of a command that creates a missing one (add, migrate), and whether
    it will be created (its file does not exist); a file in a missing folder, or a
    directory, is a CliError with exit 2."""
    db = database(arg)
    if db.file is None:
        return db, False
    created = not os.path.exists(db.file)
    folder = os.path.dirname(db.file)
    if created and not os.path.isdir(folder):
        raise CliError(f"{arg}: no such folder {folder}", EXIT_USAGE)
    if os.path.isdir(db.file):
        raise CliError(f"{arg}: is a directory, not a database file", EXIT_USAGE)
    return db, created


@contextmanager
def opened(db: Database, **options: Any) -> Iterator[Backend]:
    """The backend of ``db`` (sqlq.backends.open_backend with ``options``), closed after."""
    from ..backends import open_backend

    with _usage_error_if_refused():
        backend = open_backend(db.target, **options)
    try:
        yield backend
    finally:
        backend.close()


@contextmanager
def inspected(
    arg: str, *, allow_older: bool, creates: str = ""
) -> Iterator[tuple[Database, Backend]]:
    """An existing sqlq database opened as it is (nothing created, migrated or changed).

    Anything else is refused unchanged (see sqlq.backend): a missing file (exit 2),
    an empty one (a database not created yet: the commands that create databases,
    add and migrate, create it; the others refuse it), a file that is not a sqlq
    database, a newer schema, and an older one unless ``allow_older`` (the command
    then opens a sqlq.Queue, which migrates it as the library always does).  A
    database that another process is creating or migrating is waited for.
    """
    db = existing(arg, creates)
    with opened(db, migrate=False) as backend:
        if not allow_older:
            current_version(backend, db)
        yield db, backend


def current_version(backend: Backend, db: Database) -> int:
    """The schema version of a database opened as it is; an older one than this sqlq's
    is refused (SchemaError) with the hint to migrate it."""
    versions = backend.schema_versions()
    if versions.current < versions.latest:
        raise SchemaError(
            f"{db.name}: the database is at schema version {versions.current}, older than "
            f"this sqlq's {versions.latest}; {MIGRATE_HINT.format(path=db.name)}"
        )
    return versions.current


def sqlq_database(arg: str, *, allow_older: bool, creates: str = "") -> Database:
    """An existing sqlq database, checked as ``inspected`` does."""
    with inspected(arg, allow_older=allow_older, creates=creates) as (db, _):
        return db


def open_queue(
    db: Database,
    name: str,
    max_attempts: int | None = None,
    retry: Retry | None = None,
    aging: float | None = DEFAULT_AGING,
) -> Queue:
    """A sqlq.Queue for the commands, with the queue's stored settings but for those
    given."""
    from ..durable import Queue

    with _usage_error_if_refused():
        return Queue(
            db.target,
            max_attempts=max_attempts,
            queue=name,
            retry=retry,
            aging=aging,
        )


# --- output -------------------------------------------------------------------------------


def print_json(document: Any) -> None:
    print(json.dumps(document, indent=2))  # ASCII: safe on any terminal encoding


def error(command: str, message: str) -> None:
    print(f"sqlq {command}: error: {message}", file=sys.stderr, flush=True)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def printable(text: str) -> str:
    """``text`` as is if it prints on one line, else its Python repr."""
    return text if text.isprintable() else repr(text)


def shorten(text: str | None, width: int = 60) -> str:
    """One printable line of at most ``width`` characters (for tables)."""
    if text is None:
        return "-"
    line = printable(" ".join(text.split()))
    return line if len(line) <= width else line[: width - 3] + "..."


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[int] = (),
    indent: str = "",
) -> None:
    """Print aligned columns; the columns numbered in ``right`` align right; each line
    begins with ``indent``."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print(indent + "  ".join(cells).rstrip())


class Progress:
    """Progress lines on stderr for long runs: at most one per PROGRESS_SECONDS."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.started = self.last = time.monotonic()
        self.shown = False

    def due(self) -> bool:
        return time.monotonic() - self.last >= PROGRESS_SECONDS

    def update(self, message: str) -> None:
        if self.due():
            self.last = time.monotonic()
            self.shown = True
            print(f"sqlq {self.command}: {message}", file=sys.stderr, flush=True)
