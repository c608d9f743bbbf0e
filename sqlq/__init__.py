"""sqlq: a durable work queue with leases and retries, stored in SQLite.

* :class:`WorkQueue` - the queue in memory; every call passes ``now``.
* :class:`Queue` - the same calls with the same answers, durable in a SQLite file
  shared by many processes.
* :class:`AsyncQueue` - the calls of a Queue as coroutines, for asyncio programs.
"""

from . import errors
from .aio import AsyncQueue
from .contract import Cancel, Limit, State
from .durable import Queue
from .executors import stop_requested
from .memory import WorkQueue
from .records import Checkpoint, GroupUse, Heartbeat, Lease, Purged, QueueStats, TaskInfo
from .retry import Retry
from .schedule import Schedule
from .tasks import Task, Tasks
from .worker import TaskContext, Worker, WorkerStats, current_task

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
__version__ = "0.2.0"
