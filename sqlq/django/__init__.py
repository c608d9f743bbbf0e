"""sqlq as a backend of Django's Tasks framework (``django.tasks``, Django 6.1 and newer).

Settings::

    INSTALLED_APPS = [..., "sqlq.django"]          # the sqlq_worker command
    TASKS = {"default": {"BACKEND": "sqlq.django.Backend",
                         "OPTIONS": {"DATABASE": "default"}}}   # or "URL": "tasks.db"

A Django task becomes one sqlq task: its id is the TaskResult's id, its name the
task's import path (``Task.module_path``), its payload ``{"args": [...], "kwargs":
{...}}``, its sqlq queue the task's ``queue_name``, its priority the task's (Django's
-100..100 is a part of sqlq's -1000..1000, taken as it is) and ``run_after`` its
``run_at``.  A worker (``manage.py sqlq_worker``, or ``sqlq worker
--django-settings``) imports each task by that path and calls it; what it returns
is the task's result.  See docs/how-to/django.md.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
import uuid
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections
from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from ..backends import sqlite_dbapi
from ..contract import MAX_ERROR_LENGTH
from ..durable import Queue
from ..errors import InvalidArgument, NotRetryable
from ..records import Lease, TaskInfo
from ..worker import LOG_FORMAT, Worker

__all__ = ["Backend", "TaskFailed", "WorkerError", "django_status", "run_worker", "sqlq_priority"]

#: sqlq's states as Django's result statuses.  A task waiting for its run_after or
#: for a retry is READY ("ready to be executed again"); CANCELLED (sqlq's cancel)
#: has no status of its own in Django and is FAILED: it never ran to its end.
STATUSES: dict[str, TaskResultStatus] = {
    "AVAILABLE": TaskResultStatus.READY,
    "WAITING": TaskResultStatus.READY,
    "RESERVED": TaskResultStatus.RUNNING,
    "COMPLETED": TaskResultStatus.SUCCESSFUL,
    "DEAD": TaskResultStatus.FAILED,
    "CANCELLED": TaskResultStatus.FAILED,
}

#: Options of the TASKS entry and their defaults.
DEFAULTS: dict[str, Any] = {
    "DATABASE": None,  # a Django database alias: the queue lives in that database
    "URL": None,  # or a SQLite file (path or sqlite:/// URL) or a PostgreSQL URL
    "LEASE_SECONDS": 30.0,  # how soon a task of a crashed worker runs again
    "MAX_ATTEMPTS": 3,  # attempts a task gets (its worker dying, or errors if retried)
    "RETRY_ERRORS": False,  # True: a task that raises is retried too, not FAILED at once
    "RETRY": None,  # a sqlq.Retry between attempts (sqlq's default: at once)
    "AGING": 60.0,  # the seconds of waiting one step of priority is worth (None: strict)
    "QUEUE_OPTIONS": {},  # more keyword arguments of sqlq.Queue (busy_timeout, ...)
}

#: Keys of a PostgreSQL entry's OPTIONS that are Django's, not libpq's.
_DJANGO_PG_OPTIONS = {"isolation_level", "assume_role", "server_side_binding", "pool"}


def django_status(state: str) -> TaskResultStatus:
    """The Django result status of a task in sqlq's ``state``."""
    return STATUSES[state]


def sqlq_priority(priority: int) -> int:
    """Django's priority (-100..100, higher first) as sqlq's (-1000..1000, higher
    first): the same number, so the order is kept and each step is worth the queue's
    ``aging`` seconds of waiting, as any sqlq priority step is."""
    return int(priority)


class TaskFailed(Exception):
    """How a worker records a Django task that raised: the exception's class path on
    the first line, then its traceback (the end of it, if long), as the sqlq task's
    last error.  get_result turns it back into a ``TaskError``."""


class FinalTaskFailed(TaskFailed, NotRetryable):
    """A TaskFailed that is not retried (RETRY_ERRORS off: the task is FAILED at once)."""


class WorkerError(Exception):
    """The ``exception_class_path`` of a failure that no task code raised: the lease
    ran out (the worker died), a time limit, a cancel, a task that cannot be imported.
    The TaskError's traceback is then sqlq's last error text."""


#: The first words of the error text a worker stores for a task that raised (after
#: the class name a retried failure's text begins with).
RAISED = "task raised "


def _error_text(exc: BaseException) -> str:
    """The class path and traceback of ``exc``, within sqlq's error length."""
    kind = type(exc)
    head = f"{RAISED}{kind.__module__}.{kind.__qualname__}\n"
    trace = "".join(traceback.format_exception(exc))
    room = MAX_ERROR_LENGTH - len(head) - len(TaskFailed.__name__) - 3
    if len(trace) > room:
        trace = "…" + trace[-(room - 1) :]
    return head + trace


def task_error(last_error: str) -> TaskError:
    """A sqlq last error as Django's TaskError."""
    text = last_error.removeprefix(f"{TaskFailed.__name__}: ")
    if text.startswith(RAISED):
        path, _, trace = text[len(RAISED) :].partition("\n")
        return TaskError(exception_class_path=path, traceback=trace)
    kind = WorkerError
    return TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}", traceback=last_error
    )


def _errors(info: TaskInfo) -> list[TaskError]:
    """A result's errors: sqlq keeps the last one; a task cancelled before it ran has
    none, but is FAILED, so it gets one saying so."""
    if info.last_error is not None:
        return [task_error(info.last_error)]
    if info.state == "CANCELLED":
        return [task_error("cancelled (sqlq cancel) before it ran")]
    return []


def _moment(seconds: float | None) -> datetime | None:
    """A stored time as Django wants it: aware with USE_TZ, else naive local time."""
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    if not settings.USE_TZ:
        naive: datetime = timezone.make_naive(moment, timezone.get_default_timezone())
        return naive
    return moment


def _seconds(moment: datetime) -> float:
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_default_timezone())
    return moment.timestamp()


def database_url(alias: str) -> str:
    """The sqlq URL of Django's database ``alias``: its SQLite file, or a
    postgresql+psycopg URL with the same server, database, user and libpq options."""
    try:
        db = connections.settings[alias]
    except Exception as exc:
        raise ImproperlyConfigured(f"sqlq: DATABASE {alias!r} is not in DATABASES") from exc
    engine = db["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        name = str(db["NAME"])
        if name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
            raise ImproperlyConfigured(
                f"sqlq: DATABASE {alias!r} is in memory; the queue needs a file that "
                "workers in other processes can open"
            )
        return name
    if engine == "django.db.backends.postgresql":
        query = {
            key: str(value)
            for key, value in (db.get("OPTIONS") or {}).items()
            if key not in _DJANGO_PG_OPTIONS
        }
        host = db.get("HOST") or None
        if host and host.startswith("/"):  # a unix socket folder
            query["host"], host = host, None
        port = db.get("PORT")
        return sa.URL.create(
            "postgresql+psycopg",
            username=db.get("USER") or None,
            password=db.get("PASSWORD") or None,
            host=host,
            port=int(port) if port else None,
            database=db.get("NAME") or None,
            query=query,
        ).render_as_string(hide_password=False)
    raise ImproperlyConfigured(
        f"sqlq: DATABASE {alias!r} uses {engine}; sqlq keeps its queue in SQLite or "
        "PostgreSQL (give a URL of one in OPTIONS['URL'] instead)"
    )


class _Kept:
    """The pool's stand-in for a dialect (see sqlalchemy.pool.Pool's ``dialect``): it
    never rolls back, commits or closes the borrowed connection."""

    is_async = False
    has_terminate = False

    def do_rollback(self, dbapi_connection: Any) -> None:
        pass

    do_commit = do_terminate = do_close = do_rollback

    def _do_ping_w_event(self, dbapi_connection: Any) -> bool:
        return True

    def get_driver_connection(self, connection: Any) -> Any:
        return connection


def _borrowed(raw: Any, url: str, sqlite_module: Any) -> sa.Connection:
    """A SQLAlchemy Connection on ``raw``, a DB-API connection Django holds in an open
    transaction, for sqlq's ``conn=``.  It never commits, rolls back or closes
    ``raw`` (the transaction and the connection stay Django's), nor sets it up as
    SQLAlchemy sets up its own (functions, notice handlers): its pool is made here,
    without the engine's connect events."""
    engine = sa.create_engine(
        url if sqlite_module is None else f"sqlite:///{url}",
        poolclass=sa.pool.NullPool,  # (replaced below; it never connects)
        **({} if sqlite_module is None else {"module": sqlite_module}),
    )
    engine.pool = sa.pool.StaticPool(
        lambda: raw,
        reset_on_return=None,
        dialect=_Kept(),  # type: ignore[arg-type]
    )
    dialect: Any = engine.dialect
    dialect.do_commit = dialect.do_rollback = dialect.do_close = _Kept.do_rollback.__get__(_Kept())
    conn = engine.connect()
    conn.begin()
    return conn


class Backend(BaseTaskBackend):
    """A TASKS backend whose tasks are sqlq tasks; see the module docstring."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = set(self.options) - set(DEFAULTS)
        if unknown:
            raise ImproperlyConfigured(
                f"sqlq: unknown OPTIONS {sorted(unknown)} of TASKS[{alias!r}] "
                f"(known: {sorted(DEFAULTS)})"
            )
        self.config = {**DEFAULTS, **self.options}
        self.database: str | None = self.config["DATABASE"]
        if (self.database is None) == (self.config["URL"] is None):
            raise ImproperlyConfigured(
                f"sqlq: TASKS[{alias!r}]['OPTIONS'] names the queue's database by one of "
                "DATABASE (a Django database alias) or URL (a SQLite file or PostgreSQL URL)"
            )
        self._queues: dict[str, Queue] = {}
        self._pid = os.getpid()

    # --- the queue ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The queue's database: Django's database ``DATABASE`` as a URL, or ``URL``."""
        return (
            database_url(self.database)
            if self.database is not None
            else os.fspath(self.config["URL"])
        )

    def _sqlite_module(self) -> Any:
        """The DB-API module of Django's SQLite connections when the queue shares
        Django's SQLite database (None otherwise); it must be sqlq's own."""
        if self.database is None:
            return None
        if connections.settings[self.database]["ENGINE"] != "django.db.backends.sqlite3":
            return None
        from django.db.backends.sqlite3.base import Database

        dbapi = sqlite_dbapi()
        if Database is not dbapi:
            raise ImproperlyConfigured(
                f"sqlq: Django's SQLite connections use {Database.__name__}, sqlq's "
                f"{dbapi.__name__}: two SQLite libraries in one process do not see each "
                "other's locks on one file. Make Django use sqlq's (docs/how-to/"
                "django.md), or give the queue a file of its own (OPTIONS['URL'])"
            )
        return dbapi

    def queue(self, name: str) -> Queue:
        """The sqlq Queue of Django queue ``name`` (opened once per process)."""
        if os.getpid() != self._pid:  # forked: the parent's connections are not ours
            self._queues, self._pid = {}, os.getpid()
        opened = self._queues.get(name)
        if opened is None:
            self._sqlite_module()
            retry = self.config["RETRY"]
            opened = Queue(
                self.url,
                lease_seconds=self.config["LEASE_SECONDS"],
                max_attempts=self.config["MAX_ATTEMPTS"],
                queue=name,
                aging=self.config["AGING"],
                **({} if retry is None else {"retry": retry}),
                **self.config["QUEUE_OPTIONS"],
            )
            opened = self._queues.setdefault(name, opened)
        return opened

    def close(self) -> None:
        """Close the queues this backend opened in this process."""
        for opened in self._queues.values():
            opened.close()
        self._queues = {}

    def _conn(self) -> sa.Connection | None:
        """Django's connection as a SQLAlchemy one while Django holds it in an atomic()
        block and the queue lives in the same database, so the add commits (or rolls
        back) with the block; None otherwise."""
        if self.database is None:
            return None
        django_conn = connections[self.database]
        if not django_conn.in_atomic_block:
            return None
        django_conn.ensure_connection()
        return _borrowed(django_conn.connection, self.url, self._sqlite_module())

    # --- the framework's calls -------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        """Django's checks, and sqlq's: ``InvalidTask`` (Django's) for a task defined in
        ``__main__`` (no worker could import it) or a ``queue_name`` that cannot name a
        sqlq queue."""
        super().validate_task(task)
        if task.func.__module__ == "__main__":
            raise InvalidTask(
                "a task defined in __main__ cannot be imported by a worker; define it in a module"
            )
        name = task.queue_name
        if not isinstance(name, str) or not name or "\0" in name or len(name.encode()) > 1024:
            raise InvalidTask(f"queue_name {name!r} cannot name a sqlq queue")

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Add the task to the sqlq queue of its ``queue_name`` (in the caller's
        transaction while Django holds one on the queue's database); a READY
        TaskResult.  ``InvalidTask`` as validate_task; ``TypeError`` for arguments that
        cannot be stored as JSON; sqlq's StorageError if the database fails."""
        self.validate_task(task)
        task_id = uuid.uuid4().hex
        # (normalize_json: a TypeError for arguments that JSON cannot hold)
        result = _unfinished(task, task_id, TaskResultStatus.READY, args, kwargs, self.alias, 0)
        queue = self.queue(task.queue_name)
        conn = self._conn()
        try:
            queue.add(
                task_id,
                payload={"args": result.args, "kwargs": result.kwargs},
                name=task.module_path,
                priority=sqlq_priority(task.priority),
                run_at=None if task.run_after is None else _seconds(task.run_after),
                conn=conn,
            )
        except InvalidArgument as exc:  # an argument sqlq refuses (a float NaN, too large)
            raise TypeError(f"task arguments cannot be stored: {exc}") from exc
        finally:
            if conn is not None:
                conn.close()  # (its rollback and the pool's reset do nothing)
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The TaskResult of a task, from whichever of the backend's queues holds it;
        ``TaskResultDoesNotExist`` if none does."""
        for name in self._queue_names():
            info = self.queue(name).info(result_id)
            if info is not None:
                return self._result(info, name)
        raise TaskResultDoesNotExist(result_id)

    def _queue_names(self) -> list[str]:
        if not self.queues:
            raise ImproperlyConfigured(
                f"sqlq: TASKS[{self.alias!r}] needs its QUEUES listed to find results"
            )
        return sorted(self.queues)

    def _result(self, info: TaskInfo, queue_name: str) -> TaskResult:
        try:
            task = _task(info.name)
        except NotRetryable as exc:
            raise TaskResultDoesNotExist(f"{info.task_id}: {exc}") from exc
        task = task.using(priority=info.priority, queue_name=queue_name)
        payload = info.payload if isinstance(info.payload, dict) else {}
        status = django_status(info.state)
        tried = info.attempts > 0
        result = TaskResult(
            task=task,
            id=info.task_id,
            status=status,
            enqueued_at=_moment(info.created_at),
            started_at=_moment(info.updated_at) if tried else None,
            last_attempted_at=_moment(info.updated_at) if tried else None,
            finished_at=_moment(info.finished_at),
            args=payload.get("args", []),
            kwargs=payload.get("kwargs", {}),
            backend=self.alias,
            errors=_errors(info),
            worker_ids=[queue_name] * info.attempts,
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", info.result)
        return result


def _unfinished(
    task: Task, task_id: str, status: str, args: Any, kwargs: Any, alias: str, attempts: int
) -> TaskResult:
    """A TaskResult as enqueue returns it (READY) or a running task's context sees it."""
    now = timezone.now() if status == TaskResultStatus.RUNNING else None
    return TaskResult(
        task=task,
        id=task_id,
        status=status,
        enqueued_at=None,
        started_at=now,
        last_attempted_at=now,
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[],
        worker_ids=[task.queue_name] * attempts,
    )


def _task(path: str | None) -> Task:
    """The Django Task at import path ``path`` (NotRetryable if there is none)."""
    if not path:
        raise NotRetryable("the sqlq task has no name: it was not enqueued by Django")
    try:
        found = import_string(path)
    except ImportError as exc:
        raise NotRetryable(f"cannot import the task {path!r}: {exc}") from exc
    if not isinstance(found, Task):
        raise NotRetryable(f"{path!r} is not a Django task (decorate it with @task)")
    return found


class Runner:
    """The handler a sqlq Worker calls with each lease (``with_lease=True``): runs the
    Django task it names, between Django's close_old_connections calls, as a request
    would."""

    def __init__(self, backend: Backend, retry_errors: bool) -> None:
        self.backend = backend
        self.failure: type[TaskFailed] = TaskFailed if retry_errors else FinalTaskFailed

    def __call__(self, lease: Lease) -> Any:
        close_old_connections()
        try:
            return self.run(lease)
        finally:
            close_old_connections()

    def run(self, lease: Lease) -> Any:
        task = _task(lease.name)
        payload = lease.payload if isinstance(lease.payload, dict) else {}
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        result = _unfinished(  # its attempts: this attempt's number
            task, lease.task_id, TaskResultStatus.RUNNING, args, kwargs, self.backend.alias,
            lease.attempt,
        )  # fmt: skip
        sender = type(self.backend)
        task_started.send(sender, task_result=result)
        try:
            if task.takes_context:
                value = task.call(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            value = normalize_json(value)
        except Exception as exc:
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", timezone.now())
            task_finished.send(sender, task_result=result)
            raise self.failure(_error_text(exc)) from exc
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "_return_value", value)
        task_finished.send(sender, task_result=result)
        return value


def backend_named(alias: str) -> Backend:
    backend = task_backends[alias]
    if not isinstance(backend, Backend):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__qualname__}, "
            "not sqlq.django.Backend"
        )
    return backend


def run_worker(
    *,
    backend: str = "default",
    queue: str = "default",
    concurrency: int = 1,
    time_limit: float | None = None,
    grace: float = 30.0,
    stop_when_idle: bool = False,
    stop_when_drained: bool = False,
    summary_every: float | None = 60.0,
) -> int:
    """Run a sqlq Worker on Django queue ``queue`` of TASKS[``backend``] until SIGTERM
    or SIGINT (with ``stop_when_idle``: until nothing is left to claim).  Django must
    be set up (``setup``)."""
    if not logging.getLogger().handlers:
        logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=LOG_FORMAT)
    found = backend_named(backend)
    if found.queues and queue not in found.queues:
        raise ImproperlyConfigured(
            f"queue {queue!r} is not among TASKS[{backend!r}]['QUEUES'] {sorted(found.queues)}"
        )
    opened = found.queue(queue)
    runner = Runner(found, bool(found.config["RETRY_ERRORS"]))
    worker = Worker(
        opened,
        runner,
        with_lease=True,
        concurrency=concurrency,
        time_limit=time_limit,
        grace=grace,
        summary_every=summary_every,
    )
    worker.run(stop_when_idle=stop_when_idle, stop_when_drained=stop_when_drained)
    return 0


def setup(settings_module: str) -> None:
    """Set Django up in this process with ``settings_module`` (`sqlq worker
    --django-settings`); the current folder is importable, as for manage.py."""
    os.environ["DJANGO_SETTINGS_MODULE"] = settings_module
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    import django

    django.setup()


def add_worker_arguments(parser: Any) -> None:
    """The options of ``manage.py sqlq_worker`` and ``sqlq worker --django-settings``."""
    parser.add_argument(
        "--backend", default="default", help="the TASKS alias to serve (default: default)"
    )
    parser.add_argument(
        "--queue",
        dest="django_queue",
        default="default",
        metavar="NAME",
        help="the Django queue_name whose tasks to run (default: default)",
    )
    parser.add_argument("--concurrency", type=int, default=1, help="tasks at once (default 1)")
    parser.add_argument(
        "--time-limit", type=float, default=None, help="fail a task running longer (seconds)"
    )
    parser.add_argument(
        "--grace", type=float, default=30.0, help="seconds running tasks get after SIGTERM"
    )
    until = parser.add_mutually_exclusive_group()
    until.add_argument("--burst", action="store_true", help="stop once nothing is left to claim")
    until.add_argument(
        "--drain",
        action="store_true",
        help="stop once nothing is available, running or waiting (run_after, retries)",
    )


def worker_options(options: dict[str, Any]) -> dict[str, Any]:
    """run_worker's arguments from those of add_worker_arguments."""
    return {
        "backend": options["backend"],
        "queue": options["django_queue"],
        "concurrency": options["concurrency"],
        "time_limit": options["time_limit"],
        "grace": options["grace"],
        "stop_when_idle": options["burst"],
        "stop_when_drained": options["drain"],
    }
