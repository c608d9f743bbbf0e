"""Queue's control: cancel, pause and resume, and the per-key limits (see sqlq.contract)."""

from __future__ import annotations

from ..contract import Cancel, Limit, Number, check_limit, check_task_id, limit_key
from ..records import GroupUse
from .calls import Calls


class Control(Calls):
    """cancel, pause, resume; set_limit, remove_limit, limits, groups."""

    def cancel(self, task_id: str, now: Number | None = None) -> Cancel | None:
        """Cancel a task: one not started (AVAILABLE or WAITING) is CANCELLED at once
        (``Cancel.CANCELLED``); a running one (RESERVED) is asked to stop
        (``Cancel.STOPPING``): its worker learns it at its next heartbeat, and the
        task ends CANCELLED unless the worker completes it.  None, and no change, for
        anything else (an unknown id, a finished task)."""
        task_id = check_task_id(task_id)
        with self._call(now) as tx:
            if tx.cancel_unstarted(self.queue, task_id):
                return Cancel.CANCELLED
            return Cancel.STOPPING if tx.request_stop(self.queue, task_id) else None

    def pause(self, now: Number | None = None) -> bool:
        """Hand out no leases (in any process) until ``resume``: claims find nothing
        and ``ready`` says False; adds, and the leases already out, work as before.
        False if the queue was paused already."""
        with self._call(now) as tx:
            return tx.set_paused(self.queue, True)

    def resume(self, now: Number | None = None) -> bool:
        """Hand out leases again (announced to idle workers where the database announces
        new tasks); False if the queue was not paused."""
        with self._call(now) as tx:  # not one write: the announcement is a statement too
            return tx.set_paused(self.queue, False)

    @property
    def paused(self) -> bool:
        """Is the queue paused (by any process)?"""
        return self._backend.paused(self.queue)

    def set_limit(
        self,
        group: str | None,
        now: Number | None = None,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        per: Number | None = None,
    ) -> None:
        """Limit the tasks of ``group`` (None: every group without limits of its own,
        the queue's default), for every process: at most ``concurrency`` leases at
        once (a lease counts until it is completed, failed, released, cancelled or
        runs out), and at most ``rate`` starts (claims) per ``per`` seconds (1 if not
        given), spaced ``per / rate`` seconds apart.  None: no such limit.  The
        limits replace those the group had; claims pass over a group at its limits.
        Ungrouped tasks have no limits."""
        key = limit_key(group)
        limit = check_limit(concurrency, rate, per)
        with self._call(now) as tx:
            tx.set_limit(self.queue, key, limit)

    def remove_limit(self, group: str | None, now: Number | None = None) -> bool:
        """Forget the limits set for ``group`` (None: the default): it obeys the
        queue's default again (or, for the default, groups without limits of their
        own are unlimited).  False if none were set."""
        key = limit_key(group)
        with self._call(now) as tx:
            return tx.set_limit(self.queue, key, None)

    def limits(self, now: Number | None = None) -> dict[str | None, Limit]:
        """The limits set, by group (None: the default)."""
        with self._call(now) as tx:
            return {group or None: limit for group, limit in tx.limits(self.queue).items()}

    def groups(self, now: Number | None = None) -> dict[str, GroupUse]:
        """Each group with unfinished tasks: its leases now and its unfinished tasks."""
        with self._call(now) as tx:
            return {g: GroupUse(*use) for g, use in tx.groups_in_use(self.queue).items()}
