"""The commands that run processes: `sqlq worker` and `sqlq demo`."""

from __future__ import annotations

import argparse
import os

from ..contract import MAX_LEASE_SECONDS, State
from .common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    UsageError,
    add_lease_option,
    add_queue,
    database,
    error,
    positive_int,
    seconds,
    sqlq_database,
)

DEMO_DB = "sqlq-demo.db"
#: The fewest tasks `sqlq demo` takes (sqlq.demo.MIN_TASKS; that module loads lazily).
MIN_TASKS = 3

#: What --log-level takes.
LOG_LEVELS = ("debug", "info", "warning", "error")

#: Most worker threads one `sqlq worker` runs.
MAX_CONCURRENCY = 1024

#: Where --metrics-token may come from instead of the command line (which others may read).
METRICS_TOKEN_VARIABLE = "SQLQ_METRICS_TOKEN"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_worker(commands)


# --- sqlq worker ---------------------------------------------------------------------------


def _target(text: str) -> str:
    module, colon, attrs = text.partition(":")
    names = [*module.split("."), *attrs.split(".")]
    if not colon or not all(name.isidentifier() for name in names):
        raise argparse.ArgumentTypeError(
            f"not a handler: {text!r} (write it as package.module:function)"
        )
    return text


_target.__name__ = "handler"


def _register_worker(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser(
        "worker",
        help="run a worker: take tasks from a queue and run a Python function on each",
        description=(
            "Take tasks from a queue and run HANDLER on each: a function called with the "
            "task's payload, or a sqlq.Tasks registry that runs the function registered "
            "under the task's name. Sync functions run in threads, async ones (async def) "
            "are awaited on the worker's event loop; at most --concurrency tasks run at once, "
            "both kinds together. A handler that returns completes its task; one that "
            "raises fails it (the exception text is the task's last error) and the task is "
            "retried until it has used its attempts (sqlq.errors.NotRetryable: DEAD at once). "
            "Leases are extended while a handler runs. SIGTERM or Ctrl-C stops taking tasks "
            "and gives running handlers --grace to finish; the rest go back to the line "
            "without counting the attempt. "
            "Logs go to stderr, one event a line with key=value fields: failed, dead and lost "
            "tasks as warnings, a summary every --summary-every, every task with -v. "
            "Handlers must be idempotent: a task can run more than once."
        ),
    )
    worker.add_argument(
        "db",
        metavar="DB",
        nargs="?",
        help=(
            "the database file; it must exist (create it with `sqlq migrate` or `sqlq add`) "
            "and be a sqlq database; an older schema is migrated"
        ),
    )
    worker.add_argument(
        "target",
        metavar="HANDLER",
        type=_target,
        nargs="?",
        help=(
            "what runs each task (modules in the current folder can be named): "
            "package.module:function, a function (sync or async) that gets the task's "
            "payload; or package.module:tasks, a sqlq.Tasks registry: each task runs the "
            "function registered under its name, with its payload as keyword arguments, and "
            "a task the registry cannot run (an unknown name, arguments that do not fit) goes "
            "DEAD at once. A handler that cannot take a task is refused (exit 1) before any "
            "task is taken"
        ),
    )
    add_queue(worker)
    worker.add_argument(
        "--concurrency",
        metavar="N",
        type=positive_int(1, MAX_CONCURRENCY),
        default=1,
        help=(
            "tasks running at once: handler threads, and coroutines of async handlers "
            "(default %(default)s)"
        ),
    )
    worker.add_argument(
        "--prefetch",
        metavar="N",
        type=positive_int(0, MAX_CONCURRENCY),
        default=None,
        help=(
            "leases held at most beyond those running, so that short tasks are claimed "
            "and reported in batches; only as many as the handlers get through in about "
            "50 ms are taken, and none are held back at a stop (default: 64 less "
            "--concurrency, at least --concurrency)"
        ),
    )
    add_lease_option(
        worker,
        "length of each lease; heartbeats renew it while the handler runs, so this is "
        "how soon a task of a crashed worker runs again (default: the queue's stored "
        "setting, see `sqlq configure`)",
    )
    worker.add_argument(
        "--time-limit",
        metavar="DURATION",
        type=seconds(0, MAX_LEASE_SECONDS, allow_minimum=False),
        default=None,
        help=(
            "fail a task whose handler runs longer than this (the attempt counts); an async "
            "handler is then cancelled, a thread runs on and its result is refused. "
            "Default: no limit"
        ),
    )
    worker.add_argument(
        "--grace",
        metavar="DURATION",
        type=seconds(),
        default=30.0,
        help="on SIGTERM or Ctrl-C, how long running handlers may finish (default %(default)g)",
    )
    worker.add_argument(
        "--busy-timeout",
        metavar="DURATION",
        type=seconds(0, 86400),
        default=30.0,
        help=(
            "how long a queue call waits for the write lock before it gives up and is "
            "retried (default %(default)g); a stop request cuts waits short after --grace"
        ),
    )
    until = worker.add_mutually_exclusive_group()
    until.add_argument(
        "--burst",
        action="store_true",
        help=(
            "stop once the queue has nothing left to take (for batch jobs and tests); the "
            "last log line says what is left behind: leases other workers hold, tasks "
            "WAITING for a delay or a retry, and AVAILABLE tasks a pause or their groups' "
            "limits hold back"
        ),
    )
    until.add_argument(
        "--drain",
        action="store_true",
        help=(
            "like --burst, but also wait for the leases other workers hold and for WAITING "
            "tasks: stop once the queue has nothing AVAILABLE, RESERVED or WAITING"
        ),
    )
    logs = worker.add_mutually_exclusive_group()
    logs.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        type=str.lower,
        default="info",
        help=(
            "the least important log lines shown (default %(default)s). debug shows every "
            "task (claimed, completed); info the start, stop and summaries; warning the "
            "failed, dead and lost tasks"
        ),
    )
    logs.add_argument(
        "-v",
        "--verbose",
        dest="log_level",
        action="store_const",
        const="debug",
        help="the same as --log-level debug: a line for every task",
    )
    worker.add_argument(
        "--summary-every",
        metavar="DURATION",
        type=seconds(),
        default=60.0,
        help=(
            "log a summary line this often: tasks completed, failed, dead and lost since the "
            "last one, tasks per second, the backlog and the age of the oldest AVAILABLE "
            "task (default %(default)g; 0: never)"
        ),
    )
    worker.add_argument(
        "--synchronous",
        choices=("full", "normal"),
        default="full",
        help=(
            "SQLite durability: full survives a power loss, normal only a process crash "
            "(default %(default)s)"
        ),
    )
    worker.add_argument(
        "--fair",
        action="store_true",
        help=(
            "claim grouped tasks round robin between their groups (the group served "
            "longest ago first) instead of in line order (see `sqlq limits`)"
        ),
    )
    worker.add_argument(
        "--no-listen",
        dest="listen",
        action="store_false",
        help=(
            "PostgreSQL: poll for new tasks instead of LISTENing for their announcements "
            "(behind a connection pooler in transaction mode)"
        ),
    )
    worker.add_argument(
        "--metrics-port",
        metavar="PORT",
        type=positive_int(0, 65535),
        default=None,
        help=(
            "serve this worker's Prometheus metrics at http://127.0.0.1:PORT/metrics while "
            "it runs: tasks by outcome, transaction and handler times (0: a free port, "
            "logged at the start; needs the web extra). Default: none"
        ),
    )
    worker.add_argument(
        "--metrics-host",
        metavar="ADDRESS",
        default="127.0.0.1",
        help=(
            "the address --metrics-port serves on (default: %(default)s, this machine only); "
            "any other needs --metrics-token, as `sqlq web` needs --token"
        ),
    )
    worker.add_argument(
        "--metrics-token",
        metavar="TOKEN",
        default=None,
        help=(
            "an access token (16 characters or more) that every scrape must carry: "
            "'Authorization: Bearer TOKEN', or basic auth with TOKEN as the password. "
            f"Default: the {METRICS_TOKEN_VARIABLE} environment variable"
        ),
    )
    worker.add_argument(
        "--tracing",
        action="store_true",
        help=(
            "an OpenTelemetry span (sqlq.task) of each task run, from the global tracer "
            "provider: set it up with opentelemetry-instrument or in the handler's module "
            "(needs the otel extra)"
        ),
    )
    worker.add_argument(
        "--django-settings",
        metavar="MODULE",
        help=(
            "run a Django project's tasks instead of DB and HANDLER: set Django up with this "
            "settings module (modules in the current folder can be named) and serve "
            "--queue of the TASKS backend --django-backend (a sqlq.django.Backend, whose "
            "OPTIONS name the database); see docs/how-to/django.md"
        ),
    )
    worker.add_argument(
        "--django-backend",
        metavar="ALIAS",
        default="default",
        help="with --django-settings: the TASKS alias to serve (default %(default)s)",
    )
    worker.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    if args.django_settings is not None:
        return _django_worker(args)
    if args.db is None or args.target is None:
        if args.db is not None and not args.db.strip():
            sqlq_database(args.db, allow_older=True)  # says that no database was given
        raise UsageError("worker: give DB and HANDLER, or --django-settings MODULE")
    db = sqlq_database(args.db, allow_older=True, creates="worker does not create databases")
    # threads, signals and logging only when needed
    from ..worker import exit_past_lingering_threads, serve

    try:
        code = serve(
            db.target,
            args.target,
            queue=args.queue,
            concurrency=args.concurrency,
            prefetch=args.prefetch,
            lease_seconds=args.lease,
            time_limit=args.time_limit,
            grace=args.grace,
            stop_when_idle=args.burst,
            stop_when_drained=args.drain,
            synchronous=args.synchronous,
            busy_timeout=args.busy_timeout,
            log_level=args.log_level.upper(),
            summary_every=args.summary_every,
            fair=args.fair,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            metrics_token=(
                args.metrics_token
                if args.metrics_token is not None
                else os.environ.get(METRICS_TOKEN_VARIABLE) or None
            ),
            tracing=args.tracing,
            **({} if args.listen else {"listen": False}),  # an option PostgreSQL's alone has
        )
    except BaseException as exc:
        exit_past_lingering_threads(1, exc)  # (returns if no thread lingers)
        raise
    exit_past_lingering_threads(code)
    return code


def _django_worker(args: argparse.Namespace) -> int:
    """`sqlq worker --django-settings MODULE`: the project's tasks, by sqlq.django."""
    if args.db is not None or args.target is not None:
        raise UsageError(
            "worker: --django-settings takes no DB or HANDLER (the TASKS setting names them)"
        )
    ignored = [
        option
        for option, given in (
            ("--lease (OPTIONS['LEASE_SECONDS'])", args.lease is not None),
            ("--busy-timeout", args.busy_timeout != 30.0),
            ("--synchronous", args.synchronous != "full"),
            ("--fair", args.fair),
            ("--no-listen", not args.listen),
            ("--metrics-port", args.metrics_port is not None),
            ("--metrics-host", args.metrics_host != "127.0.0.1"),
            ("--metrics-token", args.metrics_token is not None),
            ("--tracing", args.tracing),
        )
        if given
    ]
    if ignored:  # said, rather than left out without a word
        raise UsageError(f"worker: --django-settings does not take {', '.join(ignored)}")
    from .. import django as sqlq_django  # Django only when asked for

    sqlq_django.setup(args.django_settings)
    return sqlq_django.run_worker(
        backend=args.django_backend,
        queue=args.queue,
        concurrency=args.concurrency,
        time_limit=args.time_limit,
        grace=args.grace,
        stop_when_idle=args.burst,
        stop_when_drained=args.drain,
        summary_every=args.summary_every,
    )


# --- sqlq demo -----------------------------------------------------------------------------


def register_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run worker processes on a demo queue and kill one of them mid-task",
        description=(
            "Add tasks to a queue in a new SQLite file and let worker processes, each "
            "running a sqlq.Worker, claim and complete them. One worker is killed with "
            "SIGKILL while it holds a task; that task's lease runs out and another worker "
            "completes it. One task fails once and is retried; one fails every attempt and "
            "becomes a dead letter. Prints every claim and outcome with its lease's token, "
            "and a summary (tasks per state, retries, time taken)."
        ),
    )
    demo.add_argument(
        "--db",
        metavar="PATH",
        default=None,
        help=(
            f"the demo database, a path or a sqlite:/// URL (default: ./{DEMO_DB}). An "
            "earlier demo database there is deleted first; any other file there is left "
            "alone and the demo refuses to run"
        ),
    )
    demo.add_argument(
        "--tasks",
        metavar="N",
        type=positive_int(MIN_TASKS),
        default=40,
        help=f"tasks to add, at least {MIN_TASKS} (default 40)",
    )
    demo.add_argument(
        "--workers",
        metavar="K",
        type=positive_int(2),
        default=4,
        help="worker processes, at least 2 (default 4)",
    )
    demo.add_argument(
        "--lease",
        metavar="DURATION",
        type=seconds(0, 3600, allow_minimum=False),
        default=2.0,
        help="lease of each reservation, a duration (default 2s)",
    )
    demo.set_defaults(handler=_demo)


def _demo(args: argparse.Namespace) -> int:
    from .. import demo  # multiprocessing and friends only when needed

    db = database(args.db if args.db is not None else DEMO_DB)
    if db.file is None:
        raise CliError(f"{db.name}: the demo runs on a file; give a path", EXIT_USAGE)
    path = db.file
    try:
        demo.remove_old_demo(path)
    except demo.DemoError as exc:
        error("demo", str(exc))
        return EXIT_USAGE
    result = demo.run(path, tasks=args.tasks, workers=args.workers, lease_seconds=args.lease)
    planned = {State.COMPLETED: result.tasks - 1, State.DEAD: 1}  # one dead letter, on purpose
    if {s: n for s, n in result.counts.items() if n} != planned:
        raise CliError(f"the tasks did not end as planned: {result.counts}", EXIT_ERROR)
    return EXIT_OK
