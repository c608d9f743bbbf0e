"""The worker side: run the Django task a lease names (``manage.py sqlq_worker``, or
``sqlq worker --django-settings``)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections
from django.tasks import TaskContext, TaskResultStatus, task_backends
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from ..records import Lease
from ..worker import LOG_FORMAT, Worker
from .backend import Backend
from .results import FinalTaskFailed, TaskFailed, _error_text, _task, _unfinished


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
