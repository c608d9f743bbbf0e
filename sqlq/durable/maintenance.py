"""Queue's maintenance: redriving dead letters, purging finished tasks and idle
groups in batches, and checkpoints."""

from __future__ import annotations

from collections.abc import Iterable

from ..contract import (
    FINISHED,
    Number,
    State,
    check_count,
    check_seconds,
    check_states,
    check_task_ids,
)
from ..records import Checkpoint, Purged
from .calls import Calls

#: Tasks deleted per transaction by ``purge``, so that no call holds the write lock long.
PURGE_BATCH = 1000


class Maintenance(Calls):
    """redrive, purge and checkpoint."""

    def redrive(self, now: Number | None = None, task_ids: Iterable[str] | None = None) -> int:
        """Send DEAD tasks (the given ones, or all) back to the line with attempts reset.

        Returns how many were redriven; ids that are not DEAD are skipped.  Each
        call is one transaction; redriving all takes every DEAD task at once.
        """
        ids = check_task_ids(task_ids)
        with self._call(now) as tx:
            if ids is None:
                rows = [row_id for row_id, _ in tx.dead_ids(self.queue, -1)]
            else:
                found = (tx.get(self.queue, task_id) for task_id in ids)
                rows = [t.row_id for t in found if t is not None and t.state is State.DEAD]
            return tx.redrive(rows) if rows else 0

    def purge(
        self,
        now: Number | None = None,
        *,
        states: Iterable[str] = ("COMPLETED",),
        older_than: Number = 0,
        batch_size: int = PURGE_BATCH,
    ) -> Purged:
        """Forget COMPLETED (and/or DEAD, CANCELLED) tasks finished at least
        ``older_than`` seconds ago, then the idle groups (see sqlq.contract, Per-key
        limits: a group without unfinished tasks whose rate owes it no wait; its
        limits stay).

        Deletes in transactions of at most ``batch_size`` tasks (and looks at most
        at ``batch_size`` groups in each), so that workers are never held up for
        long.  Returns how many tasks were removed (their ids can be added again),
        an int whose ``groups`` says how many groups were forgotten.
        """
        chosen = check_states(states, FINISHED)
        age = check_seconds(older_than, "older_than")
        batch = check_count(batch_size, "batch_size")
        removed = 0
        cutoff: Number | None = None
        for state in chosen:
            while True:
                with self._call(now) as tx:
                    if cutoff is None:  # fixed at the first batch: later ones use the same
                        cutoff = tx.now - age
                    deleted = tx.purge(self.queue, state, cutoff, batch)
                removed += deleted
                if deleted < batch:
                    break
        return Purged(removed, self._forget_groups(now, batch))

    def _forget_groups(self, now: Number | None, batch: int) -> int:
        """Forget the queue's idle groups, ``batch`` groups looked at a transaction."""
        forgotten = 0
        after: str | None = ""
        while after is not None:
            with self._call(now) as tx:
                gone, after = tx.forget_groups(self.queue, after, batch)
            forgotten += gone
        return forgotten

    def checkpoint(self) -> Checkpoint:
        """Copy the write-ahead log into the database file now, as far as no reader
        needs it (SQLite's PASSIVE checkpoint), and say how far it got.  On
        PostgreSQL there is no log of the queue's own (the server checkpoints its
        WAL itself): nothing to do, and the answer says so (0 frames).

        sqlq also checkpoints by itself every so often after a commit (SQLite's
        automatic checkpoints are off, since their errors go unseen); an error
        there is logged on the ``sqlq`` logger and the next one tries again.
        Here an error is raised (a :class:`sqlq.errors.StorageError`).
        """
        return self._backend.checkpoint()
