"""sqlq: a durable work queue with leases and retries, stored in SQLite.

* :class:`WorkQueue` - the queue in memory; every call passes ``now``.
* :class:`Queue` - the same calls with the same answers, durable in a SQLite file
  shared by many processes.
* :class:`AsyncQueue` - the calls of a Queue as coroutines, for asyncio programs.

The names below load on first use (PEP 562): ``import sqlq`` loads neither
SQLAlchemy nor a storage backend, so that a command such as ``sqlq --help`` starts
at once; ``sqlq.Queue`` (or ``from sqlq import Queue``) loads what a queue needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors
from .version import __version__ as __version__

if TYPE_CHECKING:
    from .aio import AsyncQueue
    from .contract import Cancel, Limit, State
    from .durable import Queue
    from .memory import WorkQueue
    from .records import Checkpoint, GroupUse, Heartbeat, Lease, Purged, QueueStats, TaskInfo
    from .retry import Retry
    from .schedule import Schedule
    from .tasks import Task, Tasks
    from .worker import TaskContext, Worker, WorkerStats, current_task
    from .worker.executors import stop_requested

#: Each public name, by the module that defines it.
_HOMES = {
    "AsyncQueue": "aio",
    "Cancel": "contract",
    "Limit": "contract",
    "State": "contract",
    "Queue": "durable",
    "stop_requested": "worker.executors",
    "WorkQueue": "memory",
    "Checkpoint": "records",
    "GroupUse": "records",
    "Heartbeat": "records",
    "Lease": "records",
    "Purged": "records",
    "QueueStats": "records",
    "TaskInfo": "records",
    "Retry": "retry",
    "Schedule": "schedule",
    "Task": "tasks",
    "Tasks": "tasks",
    "TaskContext": "worker",
    "Worker": "worker",
    "WorkerStats": "worker",
    "current_task": "worker",
}

__all__ = [
    "AsyncQueue",
    "Cancel",
    "Checkpoint",
    "GroupUse",
    "Heartbeat",
    "Lease",
    "Limit",
    "Purged",
    "Queue",
    "QueueStats",
    "Retry",
    "Schedule",
    "State",
    "Task",
    "TaskContext",
    "TaskInfo",
    "Tasks",
    "WorkQueue",
    "Worker",
    "WorkerStats",
    "current_task",
    "errors",
    "stop_requested",
]


def __getattr__(name: str) -> Any:
    """A public name, loaded from its module on first use (then a plain attribute)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'sqlq' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
