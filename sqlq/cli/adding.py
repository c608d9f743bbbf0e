"""`sqlq add`: add tasks from the command line, a file or stdin.

`add` creates a missing database (its folder must exist).  An existing file
must be a sqlq database; an older schema is migrated, as sqlq.Queue does.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from .. import payload as payloads
from ..contract import (
    DEFAULT_AGING,
    MAX_PRIORITY,
    MIN_PRIORITY,
    check_task_id,
)
from ..errors import InvalidArgument, InvalidPayload
from ..keys import ON_KEY, Added, Keyed
from ..shapes import added_json
from .common import (
    EXIT_OK,
    EXIT_USAGE,
    RETRY_SYNTAX,
    CliError,
    Progress,
    UsageError,
    add_database,
    add_json,
    add_max_attempts_option,
    add_queue,
    add_retry_option,
    creatable,
    duration,
    named,
    open_queue,
    plural,
    positive_int,
    print_json,
    printable,
    seconds,
    unix_time,
)

if TYPE_CHECKING:
    from ..durable import Queue

#: Tasks per add_many call (one transaction each) when adding from a file.
ADD_BATCH = 1000


def register_add(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add = commands.add_parser(
        "add",
        help="add tasks to a queue (creates the database if it does not exist)",
        description=(
            "Add tasks to the back of a queue's line, or WAITING until --delay or --run-at. "
            "An id that exists in any state is skipped (so running the same add twice is "
            "safe). Prints how many were added and how many already existed. A missing "
            "database file is created with the current schema (its folder must exist); an "
            "existing file must be a sqlq database."
        ),
    )
    add_database(add, "created if missing")
    add.add_argument(
        "task_ids", metavar="TASK_ID", nargs="*", help="ids of tasks to add (and/or --from-file)"
    )
    add_queue(add)
    payload = add.add_mutually_exclusive_group()
    payload.add_argument(
        "--payload",
        metavar="JSON",
        help="a JSON value given to every task that has no payload of its own",
    )
    payload.add_argument(
        "--payload-file",
        metavar="PATH",
        help="like --payload, the JSON read from a file ('-' = stdin)",
    )
    add.add_argument(
        "--raw",
        action="store_true",
        help="with --payload-file: the file's bytes as they are (a bytes payload), not JSON",
    )
    when = add.add_mutually_exclusive_group()
    when.add_argument(
        "--delay",
        metavar="DURATION",
        type=seconds(),
        help="the tasks are WAITING this long (a duration: 90, 10m, 2h) before they join the line",
    )
    when.add_argument(
        "--run-at",
        metavar="UNIX_TIME",
        type=unix_time,
        help="the tasks are WAITING until this Unix time",
    )
    add_max_attempts_option(
        add,
        "attempts each task gets before it is DEAD, stored with it (default: the "
        "queue's setting, see `sqlq configure`)",
    )
    add_retry_option(
        add,
        "how long a failed attempt waits before the next, stored with each task: "
        f"{RETRY_SYNTAX} (delays are durations; e.g. fixed:30s, exponential:1s:5m). "
        "Default: the queue's setting (see `sqlq configure`; immediate if none: back to "
        "the end of the line at once)",
    )
    add.add_argument(
        "--name",
        metavar="NAME",
        type=named("task name"),
        help=(
            "the tasks' name: a worker given a sqlq.Tasks registry runs the function "
            "registered under it, with the payload (a JSON object) as keyword arguments"
        ),
    )
    add.add_argument(
        "--key",
        metavar="KEY",
        type=named("dedupe key"),
        help=(
            "a dedupe key for the one TASK_ID: while another task of the queue holds it "
            "(WAITING, AVAILABLE or RESERVED, or finished within --key-window), --on-key "
            "says what happens, and the answer names the holder"
        ),
    )
    add.add_argument(
        "--on-key",
        choices=ON_KEY,
        help=(
            "with --key, when the key is held: refuse (the default: nothing changes), "
            "merge (nothing changes; the holder does the work) or debounce (a holder not "
            "started takes the payload and the run time of this add)"
        ),
    )
    add.add_argument(
        "--key-window",
        metavar="DURATION",
        type=duration,
        help="with --key: a holder that finished less than this long ago still holds it",
    )
    add.add_argument(
        "--priority",
        metavar="N",
        type=positive_int(MIN_PRIORITY, MAX_PRIORITY),
        default=0,
        help=(
            f"the tasks' priority, {MIN_PRIORITY} to {MAX_PRIORITY}: higher goes first, "
            "each priority in the order added (default %(default)s)"
        ),
    )
    add.add_argument(
        "--aging",
        metavar="DURATION",
        type=_aging,
        default=DEFAULT_AGING,
        help=(
            "the seconds of waiting one step of priority is worth, stored with each task: "
            "a task goes before lower priorities that came less than (difference x aging) "
            "earlier, so none starves; 'none' for strict priorities (default %(default)gs; "
            "give every process of a queue the same)"
        ),
    )
    add.add_argument(
        "--group",
        metavar="GROUP",
        type=named("group"),
        help=(
            "the tasks' group (a tenant, a user, an API): they obey its limits (see `sqlq limits`)"
        ),
    )
    add.add_argument(
        "--from-file",
        metavar="PATH",
        help=(
            "read tasks from a file ('-' = stdin), one a line: a task id (surrounding "
            'whitespace ignored), or a JSON object {"id": ..., "payload": ...} for a line '
            "starting with '{'. Blank lines are skipped. Added in batches of "
            f"{ADD_BATCH}, one transaction each, with progress on stderr; if a line is "
            "refused, the lines before it stay added and a rerun skips them"
        ),
    )
    add_json(add, "the counts")
    add.set_defaults(handler=_add)


def _add(args: argparse.Namespace) -> int:
    if not args.task_ids and args.from_file is None:
        raise UsageError("give at least one TASK_ID, or --from-file PATH")
    if args.raw and args.payload_file is None:
        raise UsageError("--raw goes with --payload-file")
    if args.from_file == "-" and args.payload_file == "-":
        raise UsageError("--from-file and --payload-file cannot both read stdin")
    keyed = args.key is not None
    if not keyed and (args.on_key is not None or args.key_window is not None):
        raise UsageError("--on-key and --key-window go with --key")
    if keyed and (len(args.task_ids) != 1 or args.from_file is not None):
        raise UsageError("--key adds one task: give one TASK_ID and no --from-file")
    default = _default_payload(args)
    try:  # refused before a database is created
        for task_id in args.task_ids:
            check_task_id(task_id)
    except InvalidArgument as exc:
        raise CliError(f"TASK_ID: {exc}; nothing was added") from exc
    db, created = creatable(args.db)
    counts = {"added": 0, "existed": 0}
    progress = Progress("add")

    def add_batch(queue: Queue, batch: list[Any], where: str) -> None:
        if args.name is not None:  # (id, payload, name) triples
            batch = [(*(i if isinstance(i, tuple) else (i, None)), args.name) for i in batch]
        try:
            results = queue.add_many(
                batch,
                delay=args.delay,
                run_at=args.run_at,
                priority=args.priority,
                group=args.group,
            )
        except InvalidArgument as exc:
            raise CliError(f"{where}: {exc}{_so_far(counts)}") from exc
        added = sum(results)
        counts["added"] += added
        counts["existed"] += len(results) - added
        progress.update(
            f"{counts['added'] + counts['existed']} tasks so far: {counts['added']} added, "
            f"{counts['existed']} already existed"
        )

    if keyed:
        return _add_keyed(args, db, created, default)

    # The input file is opened first: if it cannot be read, no database is created.
    with (
        _open_input(args.from_file) as source,
        open_queue(db, args.queue, args.max_attempts, args.retry, args.aging) as q,
    ):
        items = [t if default is None else (t, default) for t in args.task_ids]
        for start in range(0, len(items), ADD_BATCH):
            add_batch(q, items[start : start + ADD_BATCH], "TASK_ID")
        if source is not None:
            batch: list[Any] = []
            first = 1
            for number, line in enumerate(source, 1):
                try:
                    item = _parse_line(line, default)
                except ValueError as exc:
                    if batch:
                        add_batch(q, batch, f"{args.from_file}, lines {first}-{number - 1}")
                    raise CliError(
                        f"{args.from_file}, line {number}: {exc}{_so_far(counts)}", EXIT_USAGE
                    ) from None
                if item is None:
                    continue
                if not batch:
                    first = number
                batch.append(item)
                if len(batch) == ADD_BATCH:
                    add_batch(q, batch, f"{args.from_file}, lines {first}-{number}")
                    batch = []
            if batch:
                add_batch(q, batch, f"{args.from_file}, lines {first}-{number}")

    if args.json:
        print_json(added_json(db.name, args.queue, created, counts["added"], counts["existed"]))
        return EXIT_OK
    if created:
        print(f"created {db.name}")
    print(
        f"added {plural(counts['added'], 'task')} to queue {args.queue!r}; "
        f"{counts['existed']} already existed"
    )
    return EXIT_OK


def _add_keyed(args: argparse.Namespace, db: Any, created: bool, payload: Any) -> int:
    """`sqlq add TASK_ID --key KEY`: one add, answered with what happened and the holder."""
    (task_id,) = args.task_ids
    with open_queue(db, args.queue, args.max_attempts, args.retry, args.aging) as q:
        answer = q.add(
            task_id,
            payload=payload,
            delay=args.delay,
            run_at=args.run_at,
            name=args.name,
            priority=args.priority,
            key=args.key,
            on_key=args.on_key,
            key_window=args.key_window,
            group=args.group,
        )
    assert isinstance(answer, Added)
    added, existed = answer.outcome is Keyed.ADDED, answer.outcome is Keyed.EXISTS
    if args.json:
        print_json(
            {
                "database": db.name,
                "queue": args.queue,
                "created": created,
                "added": int(added),
                "existed": int(existed),
                "key": {"key": args.key, "outcome": answer.outcome.value, "holder": answer.holder},
            }
        )
        return EXIT_OK
    if created:
        print(f"created {db.name}")
    if added or existed:  # the holder: this task when added, whichever (or none) if it existed
        print(f"added {int(added)} task to queue {args.queue!r}; {int(existed)} already existed")
        holder = "no task" if answer.holder is None else f"task {printable(answer.holder)}"
        print(f"key {printable(args.key)} is held by {holder}")
    else:
        done = {Keyed.REFUSED: "not added", Keyed.MERGED: "merged into the holder"}
        what = done.get(answer.outcome, "debounced: the holder took its payload and run time")
        print(
            f"task {printable(task_id)} {what}: key {printable(args.key)} is held by task "
            f"{printable(answer.holder or '')}"
        )
    return EXIT_OK


def _aging(text: str) -> float | None:
    """--aging: a duration (more than 0), or 'none' (any case: Python's None too)
    for strict priorities."""
    if text.strip().lower() == "none":
        return None
    try:
        return seconds(allow_minimum=False)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; or 'none' for strict priorities") from None


def _so_far(counts: dict[str, int]) -> str:
    if not counts["added"] and not counts["existed"]:
        return "; nothing was added"
    return (
        f"; the tasks before it were added ({counts['added']} new, {counts['existed']} "
        "already existed) and a rerun skips them"
    )


def _default_payload(args: argparse.Namespace) -> Any:
    """The payload given by --payload or --payload-file, checked as ``add`` checks it."""
    if args.payload is not None:
        where, payload = "--payload", _json(args.payload, "--payload")
    elif args.payload_file is None:
        return None
    else:
        where = f"--payload-file {args.payload_file}"
        payload = _payload_file(args, where)
    try:
        payloads.encode(payload, payloads.DEFAULT_MAX_PAYLOAD_BYTES)
    except InvalidArgument as exc:
        raise CliError(f"{where}: {exc}; nothing was added", EXIT_USAGE) from None
    return payload


def _payload_file(args: argparse.Namespace, where: str) -> Any:
    try:
        if args.payload_file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(args.payload_file, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise CliError(f"--payload-file: {exc.strerror}: {args.payload_file}", EXIT_USAGE) from None
    if args.raw:
        return data
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CliError(
            f"{where}: not UTF-8 text (--raw stores bytes as they are)", EXIT_USAGE
        ) from None
    return _json(text, where)


def _json(text: str, where: str) -> Any:
    try:
        return payloads.decode(text)
    except InvalidPayload as exc:
        raise CliError(f"{where}: {exc}", EXIT_USAGE) from None


@contextmanager
def _open_input(name: str | None) -> Iterator[TextIO | None]:
    """The --from-file input (None without one); '-' is stdin, read as UTF-8."""
    if name is None:
        yield None
        return
    if name == "-":
        source: TextIO = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8-sig")
    else:
        try:
            source = open(name, encoding="utf-8-sig")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CliError(f"--from-file: {exc.strerror}: {name}", EXIT_USAGE) from None
    try:
        yield source
    except UnicodeDecodeError:
        raise CliError(f"--from-file {name}: not UTF-8 text", EXIT_USAGE) from None
    finally:
        if isinstance(source, io.TextIOWrapper) and name == "-":
            source.detach()  # leave sys.stdin open
        else:
            source.close()


def _parse_line(line: str, default: Any) -> str | tuple[str, Any] | None:
    """A line of --from-file as an add_many item; None for a blank line."""
    text = line.strip()
    if not text:
        return None
    if not text.startswith("{"):
        return text if default is None else (text, default)
    try:
        obj = payloads.decode(text, around=1)  # the payload is one level in
    except InvalidPayload as exc:
        raise ValueError(f"a line starting with '{{' must be a JSON object: {exc}") from None
    if not isinstance(obj, dict) or "id" not in obj or not set(obj) <= {"id", "payload"}:
        raise ValueError('a JSON line is {"id": ..., "payload": ...} (payload optional)')
    if not isinstance(obj["id"], str):
        raise ValueError(f"the id must be a JSON string, not {json.dumps(obj['id'])}")
    payload = obj.get("payload", default)
    return obj["id"] if payload is None else (obj["id"], payload)
