"""What a handler that a Worker runs can reach of its task: ``current_task()``."""

from __future__ import annotations

from dataclasses import dataclass

from ..contract import (
    Number,
)
from ..durable import Queue
from ..errors import InvalidArgument
from ..records import Lease
from .executors import current_job
from .jobs import Running


@dataclass(frozen=True)
class TaskContext:
    """What a handler that a Worker runs can reach of its task: ``current_task()``."""

    queue: Queue
    lease: Lease

    def progress(self, value: Number | None = None, message: str | None = None) -> bool:
        """Report the task's progress (``Queue.progress`` under this lease): False once
        the lease is lost.  One queue call: report at a human pace, not per item."""
        return self.queue.progress(self.lease.task_id, self.lease.token, value, message)


def current_task() -> TaskContext:
    """The task of the handler that calls it (sync or async), while a Worker runs it;
    InvalidArgument anywhere else.  Made when asked, from the job the handler runs
    (sqlq.worker.executors), not for every task."""
    job = current_job()
    if not isinstance(job, Running) or job.queue is None:
        raise InvalidArgument("current_task() is for a handler that a sqlq.Worker runs")
    return TaskContext(job.queue, job.lease)


#: Leases a worker holds at most, by default, when its handlers are quick: concurrency
#: plus a prefetch of ``max(BATCH - concurrency, concurrency)``, so that a deep queue
#: of short tasks is claimed and reported about BATCH a transaction.  64, not 32: at 8
#: processes a transaction's fixed cost (SQLite re-reads the pages other writers changed)
#: made 32 a transaction cost 1.11-1.17x the CPU per task of 64 (bench/RESULTS.md,
#: issue 24, 2026-12-08), with no more hoarding of long tasks.
