"""sqlq's records as Django's: result statuses, priorities, errors and times, and the
TaskResult a task's record (or a running lease) becomes."""

from __future__ import annotations

import traceback
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.tasks import TaskResult, TaskResultStatus
from django.tasks.base import Task, TaskError
from django.utils import timezone
from django.utils.module_loading import import_string

from ..contract import MAX_ERROR_LENGTH
from ..errors import NotRetryable
from ..records import TaskInfo

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

    __module__ = "sqlq.django"  # where it is imported from, and the class path stored


class FinalTaskFailed(TaskFailed, NotRetryable):
    """A TaskFailed that is not retried (RETRY_ERRORS off: the task is FAILED at once)."""

    __module__ = "sqlq.django"  # where it is imported from, and the class path stored


class WorkerError(Exception):
    """The ``exception_class_path`` of a failure that no task code raised: the lease
    ran out (the worker died), a time limit, a cancel, a task that cannot be imported.
    The TaskError's traceback is then sqlq's last error text."""

    __module__ = "sqlq.django"  # where it is imported from, and the class path stored


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
