"""The records of the tasks a Worker holds: :class:`Running` (one a lease, from its
claim to its report) and the :class:`Phase` it is in."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .executors import Job

if TYPE_CHECKING:
    from ..durable import Queue


class Phase(enum.Enum):
    """Where a running task of a worker is."""

    QUEUED = "queued"  # claimed (prefetched), its handler not started; heartbeats keep it
    RUNNING = "running"  # the handler runs; heartbeats keep the lease
    REPORTING = "reporting"  # the handler returned; complete/fail is being called
    TIMED_OUT = "timed out"  # failed for its time limit; the handler still runs
    RELEASED = "released"  # given back at shutdown (or abandoned); results ignored


#: States in which a task counts as in flight (a stop waits for them).
ACTIVE = (Phase.RUNNING, Phase.REPORTING)
#: States in which the worker holds the task's lease (the registry lists them).
HELD = (Phase.QUEUED, Phase.RUNNING, Phase.REPORTING)
#: States whose leases heartbeats extend: running and waiting to run.
BEATING = (Phase.QUEUED, Phase.RUNNING)


@dataclass(eq=False)
class Running(Job):
    """A task a worker runs, as the worker and its monitor track it."""

    started: float  # the worker's clock.monotonic(): claimed, then as its handler starts
    next_beat: float
    state: Phase = Phase.RUNNING
    lost: bool = False
    stuck: bool = False  # said to run on long past its time limit
    overdue: bool = False  # counted in the worker's _overdue (past its time limit, running)
    ended: float | None = None  # when the handler returned (the worker's clock)
    queue: Queue | None = None  # the worker's (what current_task() tells the handler)
