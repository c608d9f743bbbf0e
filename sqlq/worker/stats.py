"""What a Worker did with the leases it claimed: :class:`WorkerStats`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WorkerStats:
    """What a worker did with the leases it claimed.

    Once ``run`` has returned, every claimed task is in exactly one of the other
    six counts, unless reporting it raised an unexpected error or was still
    retrying Busy at shutdown (both logged; its lease then runs out).
    """

    #: Leases claimed.
    claimed: int = 0
    #: The handler returned and ``complete`` accepted it.
    completed: int = 0
    #: The handler raised and ``fail`` accepted it (retried later, or DEAD).
    failed: int = 0
    #: ``complete``/``fail``/``release`` was refused: the lease had been lost.
    lost: int = 0
    #: Given back at shutdown, its attempt not counted.
    released: int = 0
    #: Failed by the worker because the handler ran past ``time_limit``.
    timed_out: int = 0
    #: Asked to stop (``queue.cancel``) and ended by its handler short of completing:
    #: CANCELLED.
    cancelled: int = 0
    #: Of the failed and timed out, the tasks that used their last attempt and are
    #: DEAD now.  Part of those counts, so left out of comparisons.
    dead: int = field(default=0, compare=False)
    #: Transactions of the claim loop (``settle_and_claim`` calls that committed):
    #: each reported the outcomes pending and claimed for the room there was, so
    #: ``(completed + failed) / commits`` is about the tasks per commit.  A
    #: measure, not an outcome: left out of comparisons.
    commits: int = field(default=0, compare=False)
