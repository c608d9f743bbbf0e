"""The TASKS backend: a Django task enqueued as a sqlq task, its result read back."""

from __future__ import annotations

import os
import uuid
from typing import Any

import sqlalchemy as sa
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from ..backends import sqlite_dbapi
from ..durable import Queue
from ..errors import InvalidArgument, NotRetryable
from ..records import TaskInfo
from .connections import _borrowed, database_url
from .results import _errors, _moment, _seconds, _task, _unfinished, django_status, sqlq_priority

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
