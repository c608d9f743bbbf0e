"""WorkQueue's maintenance: redriving dead letters, and purging finished tasks and
idle groups."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from ..contract import FINISHED, Number, check_seconds, check_states, check_task_ids
from ..records import Purged
from .engine import Engine
from .layout import _ATTEMPTS, _DEAD, _ENDED, _FINISHED, _GROUP, _STATE


class Maintenance(Engine):
    """redrive and purge."""

    def redrive(self, now: Number, task_ids: Iterable[str] | None = None) -> int:
        """Send DEAD tasks (the given ones, or all) back to the line with attempts reset.

        Returns how many were redriven; ids that are not DEAD are skipped.
        """
        ids = check_task_ids(task_ids)
        now = self._advance(now)
        count = 0
        for task_id in self._dead_ids() if ids is None else ids:
            record = self._tasks.get(task_id)
            if record is not None and record[_STATE] is _DEAD and self._key_free(task_id):
                record[_ATTEMPTS] = 0
                record[_FINISHED] = None
                if record[_GROUP] is not None and record[_GROUP] not in self._groups:
                    self._make_group(record[_GROUP])  # purge forgot it
                self._make_available(task_id, record, now)
                count += 1
        return count

    def purge(
        self,
        now: Number,
        *,
        states: Iterable[str] = ("COMPLETED",),
        older_than: Number = 0,
    ) -> Purged:
        """Forget COMPLETED (and/or DEAD, CANCELLED) tasks finished at least ``older_than``
        seconds ago, then the idle groups (see sqlq.contract, Per-key limits).

        Returns how many tasks were removed (their ids can be added again), an int
        whose ``groups`` says how many groups were forgotten.
        """
        chosen = [s.value for s in check_states(states, FINISHED)]
        age = check_seconds(older_than, "older_than")
        now = self._advance(now)
        doomed = [
            t
            for t, record in self._tasks.items()
            if record[_STATE] in chosen
            and record[_FINISHED] is not None
            and record[_FINISHED] <= now - age
        ]
        for task_id in doomed:
            del self._tasks[task_id]
            self._results.pop(task_id, None)
            self._progress.pop(task_id, None)
            key = self._key_of.pop(task_id, None)
            if key is not None:
                self._keys[key].remove(task_id)
        return Purged(len(doomed), self._forget_groups(now) if self._groups else 0)

    def _forget_groups(self, now: Number) -> int:
        """Drop the idle groups: no unfinished task (and so no lease, nothing in
        line) and no start owed to the rate at ``now`` (walks the tasks: O(n)).
        Their entries leave the heap of groups that may start a task with them."""
        busy = {r[_GROUP] for r in self._tasks.values() if r[_STATE] not in _ENDED}
        groups = self._groups
        idle = [
            name
            for name, group in groups.items()
            if name not in busy and not group.running and group.tat <= now
        ]
        for name in idle:
            del groups[name]
        if idle:
            self._ready = [entry for entry in self._ready if entry[-1] in groups]
            heapq.heapify(self._ready)
        return len(idle)

    def _key_free(self, task_id: str) -> bool:
        """May this finished task become a holder of its key again (redrive)?  Yes if
        it has no key or no task holds it; then it is the key's latest holder."""
        key = self._key_of.get(task_id)
        if key is None:
            return True
        holders = self._keys[key]
        if self._tasks[holders[-1]][_FINISHED] is None:
            return False
        holders.remove(task_id)
        holders.append(task_id)
        return True
